"""Kinds of decoded samples: which kind a batch or a pipeline is, and how one sample is written to files.

The library knows three kinds of decoded batches:

* ``"image"`` — ``[B, 3, H, W]`` in [0, 1]: ``<stem>.png``;
* ``"video"`` — ``[B, F, 3, H, W]``: ``<stem>.gif``, ``.mp4`` with PyAV (the ``video`` extra), and a filmstrip
  ``.png`` (:func:`ddpo_grpo.video.write_video`);
* ``"array"`` — anything else: ``<stem>.npy`` (the decoded sample) and ``<stem>.png`` (the policy's preview);

and one kind of samples that are not tensors: ``"text"``, a language model's responses (a list of strings), whose
pipelines are those whose adapter's ``sample_kind`` is "text" (``policies.causal_lm``): no file, the response is the
index row's ``"response"`` (``ddpo_grpo/text_sampling.py``).

A package adds its own kind through the ``ddpo_grpo.sample_kinds`` entry point (``foundation/plugins.py``), named
for the kind: a :class:`SampleKind` that recognises its batches (checked after image and video, before array) and
its pipelines, and writes one sample — e.g. MotionWorld's ``"motion"`` (``[B, frames, 263]`` HumanML3D features:
``.npy``, a stick-figure ``.gif`` and a filmstrip ``.png``; ``worlds/motion/extras.py``). A pipeline no plug-in
kind claims is evaluated as the library's default kind, ``"image"`` (video and array pipelines included), by
``scripts/evaluate.py``; the evaluation extras of a kind are ``ddpo_grpo/evaluation_extras.py``'s.
:func:`written_formats` is the line ``scripts/sample.py`` ends with: the formats it wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation import plugins

#: the kind of pipelines that no plug-in kind claims (``kind_of_pipeline``)
DEFAULT_KIND = "image"
#: the kind of a language model's samples: response strings
TEXT_KIND = "text"


def _never(pipeline: Any) -> bool:
    return False


@dataclass(frozen=True)
class SampleKind:
    """A kind of decoded samples offered by a package (entry point ``ddpo_grpo.sample_kinds``, named ``name``)."""

    #: the kind's name: the entry point's name, and the key of its evaluation extras
    name: str
    #: ``of_samples(batch) -> bool``: a decoded batch ``[B, ...]`` (tensor or array) is of this kind
    of_samples: Callable[[Any], bool]
    #: ``write(sample, out_dir, stem, title=prompt) -> {"file": name, ...}``: writes one sample's files under
    #: ``out_dir`` and returns their names relative to it ("file" is the index row's main file; other keys beside it)
    write: Callable[..., dict[str, str]]
    #: ``of_pipeline(pipeline) -> bool``: a loaded pipeline decodes samples of this kind (before any sampling)
    of_pipeline: Callable[[Any], bool] = _never


def plugin_kinds() -> list[SampleKind]:
    """The sample kinds installed packages offer, by name; a ValueError names an entry point of the wrong type."""
    return [
        plugins.load_checked("sample_kinds", name, SampleKind, "ddpo_grpo.sample_kinds.SampleKind")
        for name in plugins.names("sample_kinds")
    ]


def kind_of_samples(samples: Any) -> str:
    """The kind of a decoded batch: "text" (strings), "image" ([B, 3, H, W]), "video" ([B, F, 3, H, W]), a plug-in
    kind, or "array"."""
    from foundation.images import is_video

    if isinstance(samples, (list, tuple)) and all(isinstance(s, str) for s in samples):
        return TEXT_KIND
    if samples.ndim == 4 and samples.shape[1] == 3:
        return "image"
    if is_video(samples):
        return "video"
    return next((k.name for k in plugin_kinds() if k.of_samples(samples)), "array")


def kind_of_pipeline(pipeline: Any) -> str:
    """:data:`TEXT_KIND` for a pipeline whose adapter samples text (a language model; its adapter's word is final),
    else the name of the plug-in kind that claims ``pipeline``'s samples, else :data:`DEFAULT_KIND`."""
    from ddpo_grpo.policies import policy_class

    try:
        text = getattr(policy_class(pipeline), "sample_kind", None) == TEXT_KIND
    except ValueError:  # no adapter: not text (loading it fails later, with its own message)
        text = False
    if text:
        return TEXT_KIND
    return next((k.name for k in plugin_kinds() if k.of_pipeline(pipeline)), DEFAULT_KIND)


def _save_png(image, path: Path) -> None:
    """image: [3, H, W] float in [0, 1] -> 8-bit RGB PNG."""
    import torch
    from PIL import Image

    array = (image.clamp(0, 1) * 255).round().to(dtype=torch.uint8).permute(1, 2, 0).cpu().numpy()
    Image.fromarray(array).save(path)


def write_sample(sample, kind: str, out: Path, stem: str, title: str, policy, fps: int = 16) -> dict[str, str]:
    """Write one decoded sample of ``kind`` as the module docstring says; return the index row's file fields (a text
    sample: ``{"response": text}``, nothing written)."""
    import numpy as np

    if kind == TEXT_KIND:
        return {"response": sample}
    if kind == "image":
        _save_png(sample, out / f"{stem}.png")
        return {"file": f"{stem}.png"}
    if kind == "video":
        from ddpo_grpo.video import write_video

        return write_video(sample, out, stem, fps)
    plugin = next((k for k in plugin_kinds() if k.name == kind), None)
    if plugin is not None:
        return plugin.write(sample, out, stem, title=title)
    np.save(out / f"{stem}.npy", sample.detach().float().cpu().numpy())
    _save_png(policy.preview(sample[None])[0], out / f"{stem}.png")
    return {"file": f"{stem}.npy", "png": f"{stem}.png"}


#: what a video sample lacks without PyAV, and how to get it (``written_formats``)
MP4_HINT = 'no MP4: install the video extra, pip install "ddpo_grpo[video]" (PyAV)'


def written_formats(kind: str, files: dict[str, str]) -> str:
    """One line saying which formats a sample of ``kind`` was written in (``files``: :func:`write_sample`'s
    return), the index row's main file first; for videos without an MP4, how to get one."""
    if kind == TEXT_KIND:
        return 'text samples written as index.jsonl\'s "response" (no files)'
    suffixes = [Path(files["file"]).suffix] + [Path(f).suffix for f in files.values()]
    formats = list(dict.fromkeys(s.lstrip(".").upper() for s in suffixes))
    line = f'{kind} samples written as {" + ".join(formats)} (index.jsonl\'s "file": the {formats[0]})'
    if kind == "video" and formats[0] != "MP4":
        line += f"; {MP4_HINT}"
    return line
