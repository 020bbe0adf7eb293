"""Images for measuring the ShapesWorld judge: mild perturbations a judge must tolerate, gray-zone shapes it
must reject.

* **Mild perturbations** (:data:`PERTURBATIONS`, :func:`perturb`) of a whole image — noise, blur, JPEG, colour
  shifts, their combination, and ``antialias``: the scene drawn again with soft edges at a random sub-pixel
  position and a real-valued size within ±0.5 px of each object's (:func:`render_antialiased`), as a
  generator that does not snap to the pixel grid would draw it. A scene stays what it was: the judge's
  verdict must not change.
* **Gray-zone distortions** (:data:`DISTORTIONS`, :func:`distorted_image`): one object of a scene replaced by
  a shape that is *not* the one it claims to be, at a graded severity in pixels — a trapezoid or a
  pinched, rounded, oblong or rotated "square", a lumpy or oval "circle", a skewed, concave or rotated
  "triangle". A scene with one is not what its prompt asks for: the judge's strict verdict must be 0.
  The mildest levels (about 1 px) are below the judge's resolution on purpose: the calibration table
  (``python -m worlds.shapes calibration --calibrate``) shows where rejection sets in.

Every shape is an implicit function of box coordinates ``(u, v) ∈ [0, 1]²`` (``u`` right, ``v`` down), drawn
into the object's ``s × s`` box by :func:`rasterize`: hard-edged at pixel centres (as the world's renderer
draws, ``supersample=1``) or anti-aliased by averaging ``supersample²`` sub-pixel samples per pixel.
Nothing here imports the judge.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import numpy as np

from .world import BACKGROUND, CANVAS, PALETTE, Scene, ShapeObject, render

Inside = Callable[[np.ndarray, np.ndarray], np.ndarray]

# --------------------------------------------------------------------------------------------
# mild perturbations of a whole image
# --------------------------------------------------------------------------------------------

#: perturbation name -> description (see :func:`perturb`)
PERTURBATIONS: dict[str, str] = {
    "clean": "none",
    "noise": "Gaussian noise, sigma = 8/255 per channel",
    "blur": "PIL GaussianBlur(radius=0.8)",
    "jpeg": "JPEG, PIL quality 75",
    "color_shift": "per-image shift of +12 or -12 (random sign) on each channel",
    "combined": "blur, then colour shift, then noise, then JPEG (all as above)",
    "antialias": "the scene redrawn with soft edges (8x8 supersampling) at a random sub-pixel offset "
    "(±0.5 px) and size (±0.5 px) per object",
}


def perturb(img: np.ndarray, kind: str, rng: np.random.Generator, scene: Scene | None = None) -> np.ndarray:
    """A perturbed copy of uint8 ``[H, W, 3]`` ``img`` (``kind`` in :data:`PERTURBATIONS`).

    ``antialias`` redraws ``scene`` (required for it) rather than filtering ``img``.
    """
    from PIL import Image, ImageFilter

    if kind == "clean":
        return img.copy()
    if kind == "noise":
        return np.clip(np.round(img + rng.normal(0.0, 8.0, img.shape)), 0, 255).astype(np.uint8)
    if kind == "blur":
        return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=0.8)))
    if kind == "jpeg":
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=75)
        buf.seek(0)
        return np.asarray(Image.open(buf).convert("RGB"))
    if kind == "color_shift":
        shift = rng.choice([-12, 12], size=3)
        return np.clip(img.astype(np.int16) + shift, 0, 255).astype(np.uint8)
    if kind == "combined":
        for k in ("blur", "color_shift", "noise", "jpeg"):
            img = perturb(img, k, rng)
        return img
    if kind == "antialias":
        if scene is None:
            raise ValueError("perturb(kind='antialias') redraws the scene: pass scene=")
        return render_antialiased(scene, rng)
    raise ValueError(f"unknown perturbation {kind!r}; perturbations: {', '.join(PERTURBATIONS)}")


# --------------------------------------------------------------------------------------------
# implicit shapes and their rasterisation
# --------------------------------------------------------------------------------------------


def _ideal(shape: str) -> Inside:
    """The world's three shapes as implicit functions of box coordinates (see world.py's rasterisation)."""
    if shape == "square":
        return lambda u, v: np.ones(np.broadcast(u, v).shape, dtype=bool)
    if shape == "circle":
        return lambda u, v: (u - 0.5) ** 2 + (v - 0.5) ** 2 <= 0.25
    if shape == "triangle":
        return lambda u, v: np.abs(u - 0.5) <= v / 2.0
    raise ValueError(f"unknown shape {shape!r}")


def rasterize(inside: Inside, x: float, y: float, size: float, supersample: int = 1) -> np.ndarray:
    """Coverage ``[CANVAS, CANVAS]`` in [0, 1] of the shape ``inside`` drawn in the box ``[x, x+size) × [y, y+size)``.

    Each pixel is sampled at ``supersample²`` evenly spaced points (1: its centre, the renderer's hard edge);
    a point inside the box at box coordinates ``(u, v) = ((px − x) / size, (py − y) / size)`` is covered when
    ``inside(u, v)``.
    """
    k = int(supersample)
    offs = (np.arange(k) + 0.5) / k  # sub-pixel sample positions
    grid = (np.arange(CANVAS)[:, None] + offs[None, :]).ravel()  # [CANVAS * k]
    u = (grid[None, :] - x) / size
    v = (grid[:, None] - y) / size
    in_box = (u >= 0) & (u < 1) & (v >= 0) & (v < 1)
    hit = in_box & inside(np.clip(u, 0, 1), np.clip(v, 0, 1))
    return hit.reshape(CANVAS, k, CANVAS, k).mean(axis=(1, 3))


def paint(img: np.ndarray, coverage: np.ndarray, color: str) -> np.ndarray:
    """``img`` with ``color`` blended in by ``coverage`` (``W + a (C − W)`` over the existing pixel), as uint8."""
    c = np.asarray(PALETTE[color], dtype=np.float64)
    out = img.astype(np.float64) * (1.0 - coverage[..., None]) + c * coverage[..., None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def blank() -> np.ndarray:
    img = np.empty((CANVAS, CANVAS, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    return img


def render_antialiased(scene: Scene, rng: np.random.Generator, supersample: int = 8) -> np.ndarray:
    """``scene`` drawn with soft edges: each object's box moved by up to ±0.5 px and resized by up to ±0.5 px
    (uniform, independent), its ideal shape anti-aliased with ``supersample²`` samples per pixel."""
    img = blank()
    for o in scene:
        ds = rng.uniform(-0.5, 0.5)
        x, y = o.x + rng.uniform(-0.5, 0.5) - ds / 2, o.y + rng.uniform(-0.5, 0.5) - ds / 2
        img = paint(img, rasterize(_ideal(o.shape), x, y, o.size + ds, supersample), o.color)
    return img


# --------------------------------------------------------------------------------------------
# gray-zone distortions
# --------------------------------------------------------------------------------------------


def _trapezoid(k: float, s: int, rng) -> Inside:
    """A square whose top (or, at random, bottom) edge is inset by ``k`` px at each end."""
    flip = bool(rng.integers(2))
    return lambda u, v: np.abs(u - 0.5) <= 0.5 - k / s * (v if flip else 1.0 - v)


def _pinched(d: float, s: int, rng) -> Inside:
    """A square whose four sides bow inwards by ``d`` px at their middles (parabolic arcs)."""
    return lambda u, v: (
        (np.abs(u - 0.5) <= 0.5 - d / s * (1.0 - (2 * v - 1) ** 2))
        & (np.abs(v - 0.5) <= 0.5 - d / s * (1.0 - (2 * u - 1) ** 2))
    )


def _rounded(r: float, s: int, rng) -> Inside:
    """A square with corners rounded to radius ``r`` px (``r = s/2`` is the circle)."""
    rr = r / s

    def inside(u, v):
        cu = np.clip(u, rr, 1.0 - rr)
        cv = np.clip(v, rr, 1.0 - rr)
        return (u - cu) ** 2 + (v - cv) ** 2 <= rr**2

    return inside


def _oblong(d: float, s: int, rng) -> Inside:
    """A rectangle: the square's height (or, at random, width) shortened by ``d`` px, centred."""
    vertical = bool(rng.integers(2))
    return lambda u, v: np.abs((u if vertical else v) - 0.5) <= 0.5 - d / (2 * s)


def _rotated(shape: str) -> Callable:
    def make(deg: float, s: int, rng) -> Inside:
        """The ideal ``shape`` rotated by ``deg`` degrees (random sign) about the box centre, shrunk to fit the box."""
        a = math.radians(deg) * (1 if rng.integers(2) else -1)
        c, sn = math.cos(a), math.sin(a)
        scale = abs(c) + abs(sn)  # a rotated square's extent; triangles are inside it
        ideal = _ideal(shape)

        def inside(u, v):
            du, dv = (u - 0.5) * scale, (v - 0.5) * scale
            return (
                ideal(0.5 + c * du + sn * dv, 0.5 - sn * du + c * dv)
                & (np.abs(c * du + sn * dv) <= 0.5)
                & (np.abs(-sn * du + c * dv) <= 0.5)
            )

        return inside

    return make


def _lumpy(d: float, s: int, rng) -> Inside:
    """A blob: the circle's radius modulated by ``±d`` px (harmonics 3–6, random amplitudes and phases)."""
    ks = np.arange(3, 7)
    amp = rng.uniform(0.3, 1.0, len(ks))
    phase = rng.uniform(0, 2 * np.pi, len(ks))
    phi = np.linspace(0, 2 * np.pi, 721)
    f = (amp[:, None] * np.cos(ks[:, None] * phi[None, :] + phase[:, None])).sum(0)
    norm = np.abs(f).max()
    r0 = 0.5 - d / s

    def inside(u, v):
        du, dv = u - 0.5, v - 0.5
        ang = np.arctan2(dv, du)
        g = (amp[:, None, None] * np.cos(ks[:, None, None] * ang[None] + phase[:, None, None])).sum(0) / norm
        return du**2 + dv**2 <= (r0 + d / s * g) ** 2

    return inside


def _oval(d: float, s: int, rng) -> Inside:
    """An ellipse: the circle's vertical (or, at random, horizontal) diameter shortened by ``d`` px."""
    vertical = bool(rng.integers(2))
    q = 0.5 - d / (2 * s)

    def inside(u, v):
        a, b = (u, v) if vertical else (v, u)
        return ((a - 0.5) / 0.5) ** 2 + ((b - 0.5) / q) ** 2 <= 1.0

    return inside


def _skewed(k: float, s: int, rng) -> Inside:
    """A triangle whose apex is moved sideways by ``k`` px (random side): not isosceles."""
    a = 0.5 + (k / s) * (1 if rng.integers(2) else -1)
    return lambda u, v: (u >= a * (1.0 - v)) & (u <= a + (1.0 - a) * v)


def _concave(d: float, s: int, rng) -> Inside:
    """A triangle whose two slanted sides bow inwards by ``d`` px at mid-height (parabolic)."""
    return lambda u, v: np.abs(u - 0.5) <= v / 2.0 - d / s * 4.0 * v * (1.0 - v)


#: distortion name -> (the shape it claims to be, its generator, its severity unit, severity levels)
DISTORTIONS: dict[str, tuple[str, Callable, str, tuple[float, ...]]] = {
    "trapezoid": ("square", _trapezoid, "px inset of each end of one edge", (1, 2, 3, 4)),
    "pinched_square": ("square", _pinched, "px inward bow of each side", (1, 2, 3)),
    "rounded_square": ("square", _rounded, "px corner radius", (3, 5, 7)),
    "oblong": ("square", _oblong, "px shorter side", (2, 3, 4)),
    "rotated_square": ("square", _rotated("square"), "degrees", (10, 20, 30, 45)),
    "lumpy_circle": ("circle", _lumpy, "px radial lumps (±)", (1, 1.5, 2, 3)),
    "oval": ("circle", _oval, "px shorter diameter", (2, 3, 4)),
    "skewed_triangle": ("triangle", _skewed, "px apex offset", (2, 3, 4, 6)),
    "concave_triangle": ("triangle", _concave, "px inward bow of the slanted sides", (1, 2, 3)),
    "rotated_triangle": ("triangle", _rotated("triangle"), "degrees", (10, 20, 30)),
}


def distorted_object_mask(obj: ShapeObject, kind: str, severity: float, rng: np.random.Generator) -> np.ndarray:
    """Coverage ``[CANVAS, CANVAS]`` (hard-edged: 0 or 1) of ``obj`` drawn as distortion ``kind`` in its own box."""
    if kind not in DISTORTIONS:
        raise ValueError(f"unknown distortion {kind!r}; distortions: {', '.join(DISTORTIONS)}")
    make = DISTORTIONS[kind][1]
    return rasterize(make(severity, obj.size, rng), obj.x, obj.y, obj.size)


def distorted_image(scene: Scene, index: int, kind: str, severity: float, rng: np.random.Generator) -> np.ndarray:
    """uint8 render of ``scene`` with object ``index`` drawn as distortion ``kind`` (in its own box, same colour)."""
    others = [o for i, o in enumerate(scene) if i != index]
    img = render(others)
    return paint(img, distorted_object_mask(scene[index], kind, severity, rng), scene[index].color)


__all__ = [
    "DISTORTIONS",
    "PERTURBATIONS",
    "blank",
    "distorted_image",
    "distorted_object_mask",
    "paint",
    "perturb",
    "rasterize",
    "render_antialiased",
]
