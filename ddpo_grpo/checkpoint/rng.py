"""RNG state of a process: captured into a checkpoint, restored on resume (exact replay)."""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """JSON-serialisable snapshot of python ``random``, numpy global, torch CPU (and CUDA) RNGs."""
    import torch

    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    out: dict[str, Any] = {
        "python": [py_version, list(py_internal), py_gauss],
        "numpy": [np_name, np.asarray(np_keys).tolist(), int(np_pos), int(np_has_gauss), float(np_cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        out["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return out


def set_rng_state(d: dict[str, Any]) -> None:
    """Restore RNG states captured by :func:`rng_state` (missing entries are left alone)."""
    import torch

    if "python" in d:
        version, internal, gauss = d["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in d:
        name, keys, pos, has_gauss, cached = d["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    if "torch" in d:
        torch.set_rng_state(torch.tensor(d["torch"], dtype=torch.uint8))
    if "cuda" in d and torch.cuda.is_available():
        states = d["cuda"]
        n = torch.cuda.device_count()
        if len(states) != n:
            warnings.warn(
                f"checkpoint has CUDA RNG states for {len(states)} devices, this machine has {n}; "
                f"restoring the first {min(n, len(states))}",
                stacklevel=2,
            )
        for i, s in enumerate(states[:n]):
            torch.cuda.set_rng_state(torch.tensor(s, dtype=torch.uint8), device=i)
