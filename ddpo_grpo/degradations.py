"""Degradation operators D of the data-consistency loss ‖D(x̂) − y‖² (the supervised term's, ``supervised.py``).

The simulation that makes restoration data from the same specs (noise, JPEG, …) is the restoration world's
(``worlds/shapes_i2i/degradations.py``); this module holds the spec language and the differentiable operators.

A degradation is named by a *spec*: a dict ``{"kind": ..., <parameter>: ...}`` (what dataset rows store in
their ``degradation`` field), a string ``"kind:value"`` (config fields, e.g. ``train.degradation``), or a
list of either (applied in order). :func:`parse` validates any of them into :class:`Degradation` steps.

=============  ==============  ===============================================================  ==============
kind           parameter       simulation ``degrade(x)`` (data)                                  loss operator
=============  ==============  ===============================================================  ==============
``identity``   —               ``x``                                                            exact
``downsample`` ``factor`` k    area-average to ``round(H/k) × round(W/k)``, bilinear back up    exact
               (1 < k ≤ 8)     to ``H × W`` (``align_corners=False``)                           (differentiable)
``blur``       ``sigma`` σ     separable Gaussian, radius ``ceil(3σ)``, reflect padding          exact
               (0 < σ ≤ 8)                                                                      (differentiable)
``noise``      ``sigma`` σ     ``clamp(x + σ·n, 0, 1)``, ``n ~ N(0, I)`` from the generator      identity
               (0 < σ ≤ 1)
``jpeg``       ``quality`` q   PIL JPEG at quality q (4:2:0 chroma), decoded                     identity
               (1 ≤ q ≤ 95)
=============  ==============  ===============================================================  ==============

Images are float ``[B, 3, H, W]`` in ``[0, 1]``. The world's ``degrade`` is the simulation (noise and JPEG are
not differentiable; JPEG runs on uint8 through PIL); :func:`operator` is the differentiable ``D`` of a
data-consistency term ``‖D(x̂) − y‖²``. For ``noise`` the operator is the identity: with zero-mean noise
``E‖x̂ − y‖² = ‖x̂ − x‖² + const`` (clamping at 0 and 1 aside), so the identity is D in expectation. For
``jpeg`` it is the identity too, a documented approximation (JPEG at the qualities used here changes
ShapesWorld renders by a few grey levels away from edges; a differentiable JPEG is out of scope).
:func:`consistency_loss` evaluates the term per sample with one spec per sample (e.g. each row's own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: kind -> (parameter name, lower bound (exclusive unless noted), upper bound (inclusive))
KINDS: dict[str, tuple[str | None, float, float]] = {
    "identity": (None, 0.0, 0.0),
    "downsample": ("factor", 1.0, 8.0),
    "blur": ("sigma", 0.0, 8.0),
    "noise": ("sigma", 0.0, 1.0),
    "jpeg": ("quality", 1.0, 95.0),  # inclusive lower bound: quality 1 is valid
}
#: kinds whose loss operator is the identity (see the module docstring)
IDENTITY_IN_LOSS = ("identity", "noise", "jpeg")

Spec = Mapping | str | Sequence


@dataclass(frozen=True)
class Degradation:
    """One validated step: ``kind`` and its parameter ``value`` (None for identity)."""

    kind: str
    value: float | None = None

    @property
    def name(self) -> str:
        """Short label: ``identity``, ``downsample_x2``, ``blur_s1.5``, ``noise_s0.1``, ``jpeg_q20``."""
        if self.kind == "identity":
            return "identity"
        if self.kind == "downsample":
            return f"downsample_x{_fmt(self.value)}"
        if self.kind == "jpeg":
            return f"jpeg_q{int(self.value)}"
        return f"{self.kind}_s{_fmt(self.value)}"

    def to_dict(self) -> dict:
        param = KINDS[self.kind][0]
        return {"kind": self.kind} if param is None else {"kind": self.kind, param: self.value}


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _step(spec, where: str) -> Degradation:
    if isinstance(spec, str):
        kind, _, raw = spec.strip().partition(":")
        if kind not in KINDS:
            raise ValueError(
                f"{where}: unknown degradation {kind!r}; kinds: {', '.join(KINDS)} "
                "(write e.g. 'downsample:2', 'blur:1.5', 'noise:0.1', 'jpeg:20', 'identity')"
            )
        param = KINDS[kind][0]
        if param is None:
            if raw:
                raise ValueError(f"{where}: 'identity' takes no value, got {spec!r}")
            return Degradation("identity")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{where}: {spec!r} needs a number after ':' (its {param}), e.g. '{kind}:2'") from None
        return _checked(kind, value, where)
    if isinstance(spec, Mapping):
        kind = spec.get("kind")
        if kind not in KINDS:
            raise ValueError(f"{where}: degradation {dict(spec)!r} needs 'kind' in {list(KINDS)}")
        param = KINDS[kind][0]
        extra = set(spec) - {"kind", param}
        if extra:
            raise ValueError(f"{where}: degradation {kind!r} takes only {param!r}; unexpected {sorted(extra)}")
        if param is None:
            return Degradation("identity")
        if param not in spec:
            raise ValueError(
                f"{where}: degradation {kind!r} needs its {param!r}, e.g. {{'kind': {kind!r}, {param!r}: ...}}"
            )
        value = spec[param]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: degradation {kind!r} {param!r} must be a number, got {value!r}")
        return _checked(kind, float(value), where)
    raise ValueError(
        f"{where}: a degradation is a dict, a 'kind:value' string or a list of them; got {type(spec).__name__}"
    )


def _checked(kind: str, value: float, where: str) -> Degradation:
    param, lo, hi = KINDS[kind]
    low_ok = value >= lo if kind == "jpeg" else value > lo
    if not (math.isfinite(value) and low_ok and value <= hi):
        bound = f"[{lo:g}, {hi:g}]" if kind == "jpeg" else f"({lo:g}, {hi:g}]"
        raise ValueError(f"{where}: degradation {kind!r} {param}={value!r} must be in {bound}")
    if kind == "jpeg" and not value.is_integer():
        raise ValueError(f"{where}: degradation 'jpeg' quality must be an integer, got {value!r}")
    return Degradation(kind, value)


def parse(spec: Spec, where: str = "degradation") -> tuple[Degradation, ...]:
    """The validated steps of ``spec`` (see the module docstring); ValueError naming ``where`` and the fix."""
    if isinstance(spec, (str, Mapping)):
        return (_step(spec, where),)
    if isinstance(spec, Sequence) and spec:
        return tuple(_step(s, f"{where}[{i}]") for i, s in enumerate(spec))
    raise ValueError(
        f"{where}: expected a degradation dict, a 'kind:value' string or a non-empty list of them, got {spec!r}"
    )


def name(spec: Spec) -> str:
    """Label of a spec: its steps' names joined by ``+`` (e.g. ``blur_s1+noise_s0.05``)."""
    return "+".join(step.name for step in parse(spec))


# ------------------------------------------------------------------------------------ operators
def downsample(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Area-average ``x`` [B, C, H, W] to ``round(H/k) × round(W/k)``, then bilinear back to H × W."""
    h, w = x.shape[-2:]
    small = F.interpolate(x, size=(max(1, round(h / factor)), max(1, round(w / factor))), mode="area")
    return F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False)


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``x`` [B, C, H, W] (radius ceil(3σ), kernel normalised, reflect padding)."""
    radius = max(1, math.ceil(3.0 * sigma))
    r = torch.arange(-radius, radius + 1, dtype=torch.float64)
    k = torch.exp(-(r**2) / (2.0 * sigma**2))
    k = (k / k.sum()).to(device=x.device, dtype=x.dtype)
    c = x.shape[1]
    pad = min(radius, x.shape[-1] - 1, x.shape[-2] - 1)  # reflect padding needs pad < side
    out = F.pad(x, (radius, radius, radius, radius), mode="reflect" if pad == radius else "replicate")
    out = F.conv2d(out, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)  # along W
    return F.conv2d(out, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)  # along H


def operator(spec: Spec) -> Callable[[torch.Tensor], torch.Tensor]:
    """The differentiable D of ``spec`` for a consistency loss (noise and JPEG: identity; module docstring)."""
    steps = [s for s in parse(spec) if s.kind not in IDENTITY_IN_LOSS]

    def apply(x: torch.Tensor) -> torch.Tensor:
        for step in steps:
            x = downsample(x, step.value) if step.kind == "downsample" else gaussian_blur(x, step.value)
        return x

    return apply


def consistency_loss(x_hat: torch.Tensor, y: torch.Tensor, specs: Spec | Sequence[Spec]) -> torch.Tensor:
    """Per-sample data consistency ``mean over C, H, W of (D_i(x̂_i) − y_i)²``: ``[B]``.

    x_hat: [B, 3, H, W] the restored images (differentiable); y: [B, 3, H, W] the degraded observations;
    specs: one spec (a dict or a string) for every sample, or a list of exactly B specs, one per sample
    (each row's ``degradation``; a chain for sample i is a list inside that list). Samples sharing a spec
    are degraded together.
    """
    if x_hat.shape != y.shape or x_hat.ndim != 4:
        raise ValueError(
            f"consistency_loss: expected two [B, C, H, W] tensors of one shape, "
            f"got {tuple(x_hat.shape)}, {tuple(y.shape)}"
        )
    b = x_hat.shape[0]
    if isinstance(specs, (str, Mapping)):
        return (operator(specs)(x_hat) - y).pow(2).flatten(1).mean(dim=1)
    if not isinstance(specs, Sequence) or len(specs) != b:
        raise ValueError(
            f"consistency_loss: specs must be one degradation or a list of one per sample ({b}), got {specs!r}"
        )
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(specs):
        groups.setdefault(parse(s, f"degradation of sample {i}"), []).append(i)
    out = x_hat.new_zeros(b)
    for steps, members in groups.items():
        idx = torch.as_tensor(members, device=x_hat.device)
        d = operator([s.to_dict() for s in steps])(x_hat[idx])
        out = out.index_put((idx,), (d - y[idx]).pow(2).flatten(1).mean(dim=1))
    return out


__all__ = [
    "IDENTITY_IN_LOSS",
    "KINDS",
    "Degradation",
    "consistency_loss",
    "downsample",
    "gaussian_blur",
    "name",
    "operator",
    "parse",
]
