"""The detector's learned shape classifier: a small CNN on one object's coverage patch.

Input: a ``PATCH × PATCH`` (28 × 28) window centred on the object's bounding-box centre, holding the
coverage of the object's colour (:func:`~.segment.coverages`, clipped to [0, 1]) on the object's pixels
dilated by one pixel, 0 elsewhere (so a neighbour of the same colour does not leak in). The window is at
the world's 64-px scale, so the network sees absolute size too (spec objects are 12–18 px).

Output: logits over :data:`CLASSES` — the three spec shapes and ``"other"`` (anything that is not a spec
shape: a trapezoid or pinched "square", a lumpy "circle", a skewed triangle, a shape of the wrong size, ...).

Architecture (114,724 parameters, 0.46 MB as float32): conv 3×3 (1→16) ReLU, max-pool 2 → conv 3×3
(16→32) ReLU, max-pool 2 → conv 3×3 (32→32) ReLU → flatten (32·7·7) → linear 64 ReLU → linear 4.
The shipped weights (``worlds/shapes/models/detector/detector.npz``, plain arrays, no pickle) are
reproduced by ``python -m worlds.shapes train-detector`` from its seed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .segment import coverages

#: class names, in logit order
CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "other")
#: side of the classifier's input window (px at 64 × 64)
PATCH = 28
#: objects whose bounding box has a side outside this range are "other" without asking the network
MIN_SIDE, MAX_SIDE = 8, PATCH - 2
#: the shipped weights
WEIGHTS = Path(__file__).resolve().parents[1] / "models" / "detector" / "detector.npz"


class ShapeNet(nn.Module):
    """The CNN of the module docstring: ``[B, 1, 28, 28]`` patches -> ``[B, 4]`` logits."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, len(CLASSES)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def patch(img: np.ndarray, obj: dict, cov: np.ndarray | None = None) -> np.ndarray:
    """float32 ``[PATCH, PATCH]``: the input window of object ``obj`` (from :func:`~.segment.segment`) in the
    64-px uint8 image ``img`` (``cov``: its :func:`~.segment.coverages`, computed when not given)."""
    from ..world import COLORS

    if cov is None:
        cov = coverages(img)
    k = COLORS.index(obj["color"])
    m = obj["mask"]
    grown = m.copy()  # dilate by one pixel (8-neighbourhood)
    grown[1:] |= m[:-1]
    grown[:-1] |= m[1:]
    grown[:, 1:] |= grown[:, :-1].copy()
    grown[:, :-1] |= grown[:, 1:].copy()
    field = np.clip(cov[k], 0.0, 1.0) * grown
    h, w = field.shape
    cx, cy = obj["centre"]
    x0, y0 = int(np.floor(cx - PATCH / 2 + 0.5)), int(np.floor(cy - PATCH / 2 + 0.5))
    out = np.zeros((PATCH, PATCH), dtype=np.float32)
    sx0, sy0, sx1, sy1 = max(x0, 0), max(y0, 0), min(x0 + PATCH, w), min(y0 + PATCH, h)
    out[sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0] = field[sy0:sy1, sx0:sx1]
    return out


def state_to_arrays(model: ShapeNet) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}


@lru_cache(maxsize=4)
def load(path: str | None = None) -> ShapeNet:
    """The classifier with the weights at ``path`` (default: the shipped :data:`WEIGHTS`), in eval mode."""
    file = Path(path) if path else WEIGHTS
    if not file.is_file():
        raise ValueError(
            f"shapes_detector: no weights at {file}; reproduce them with `python -m worlds.shapes train-detector`"
        )
    with np.load(file, allow_pickle=False) as z:
        state = {k: torch.from_numpy(z[k].copy()) for k in z.files}
    model = ShapeNet()
    model.load_state_dict(state)
    return model.eval()


def classify(patches: np.ndarray, model: ShapeNet | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Class indices and their probabilities for float ``[N, PATCH, PATCH]`` patches."""
    if len(patches) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    model = model or load()
    with torch.no_grad():
        p = torch.softmax(model(torch.from_numpy(np.asarray(patches, np.float32))[:, None]), -1)
    conf, cls = p.max(-1)
    return cls.numpy(), conf.numpy()
