"""Atomic checkpoint directories: write, find, load (the files; what a run puts in them is ``run_state.py``).

Layout::

    <run_dir>/checkpoints/epoch_000012/
        model.safetensors      # one file per entry of ``tensors`` (stem -> state dict)
        ema.safetensors        # optional extra stems
        optimizer.pt           # torch.save(optimizer.state_dict()), loaded with weights_only=True
        state.json             # trainer state (epoch, global_step, RNG states, ...), written last

A checkpoint is first written to a hidden sibling ``checkpoints/.tmp-epoch_XXXXXX-<pid>``,
every file is fsynced, then the directory is renamed into place. A crash at any
moment therefore leaves earlier checkpoints intact and never a half-written
``epoch_*`` directory. Readers only consider ``epoch_<digits>`` directories that
contain ``state.json``; hidden ``.tmp-*`` / ``.old-*`` leftovers are ignored and
removed by the next save. Only one process (the main one) should save into a run dir.

Nothing non-finite is saved: a tensor (or optimizer-state tensor) with a NaN or inf refuses the whole
checkpoint (:class:`NonFiniteError`, naming the tensor), and the previous checkpoint stays the newest.
``state.json`` records every other file's size; :func:`load_checkpoint` raises
:class:`CorruptCheckpointError` naming the file that is missing, truncated or unreadable, and
:func:`load_latest` falls back from a corrupt newest checkpoint to the previous complete one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from foundation.errors import UserError

CHECKPOINTS_DIRNAME = "checkpoints"
STATE_FILE = "state.json"
OPTIMIZER_FILE = "optimizer.pt"
TENSOR_SUFFIX = ".safetensors"
_CKPT_RE = re.compile(r"^epoch_(\d+)$")
_STEM_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
TMP_PREFIX = ".tmp-"
OLD_PREFIX = ".old-"

PathLike = str | os.PathLike
FILES_KEY = "_files"  # state.json entry: file name -> size in bytes, of every other file of the checkpoint


class NonFiniteError(UserError, ValueError):
    """A tensor to be saved (or loaded for resuming) holds NaN or inf values."""


class CorruptCheckpointError(UserError, ValueError):
    """A checkpoint file is missing, truncated or unreadable (``path`` is the checkpoint, ``file`` the culprit)."""

    def __init__(self, path: Path, file: str, reason: str):
        super().__init__(f"checkpoint {path}: {file} is {reason}")
        self.path, self.file, self.reason = path, file, reason


# ---------------------------------------------------------------------------
# filesystem helpers
# ---------------------------------------------------------------------------


def ckpt_name(epoch: int) -> str:
    return f"epoch_{int(epoch):06d}"


def _fsync_file(path: Path) -> None:
    """Flush a written file's contents to disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (new/renamed children) to disk; no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file under ``root`` and every directory entry to disk (before ``move_into_place``)."""
    for path in sorted(Path(root).rglob("*"), reverse=True):
        if path.is_file():
            _fsync_file(path)
        else:
            fsync_dir(path)
    fsync_dir(Path(root))


def leftovers(run_dir: PathLike) -> list[Path]:
    """Hidden ``.tmp-*`` / ``.old-*`` directories a killed run left in ``run_dir`` and its ``checkpoints/``."""
    found = []
    for root in (Path(run_dir), Path(run_dir) / CHECKPOINTS_DIRNAME):
        if root.is_dir():
            found += sorted(p for p in root.iterdir() if p.name.startswith((TMP_PREFIX, OLD_PREFIX)))
    return found


def _is_complete(path: Path) -> bool:
    return path.is_dir() and _CKPT_RE.match(path.name) is not None and (path / STATE_FILE).is_file()


def list_checkpoints(root: PathLike) -> list[Path]:
    """Complete checkpoint dirs under ``root`` (a run dir or its ``checkpoints/``), oldest first."""
    root = Path(root)
    if (root / CHECKPOINTS_DIRNAME).is_dir():
        root = root / CHECKPOINTS_DIRNAME
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _is_complete(p)]
    return sorted(found, key=lambda p: int(_CKPT_RE.match(p.name).group(1)))


def _cleanup_leftovers(root: Path) -> None:
    """Remove ``.tmp-*`` dirs; restore an ``.old-epoch_X-*`` dir whose ``epoch_X`` went missing.

    An ``.old-*`` dir only exists if a crash hit between moving an existing checkpoint
    away and moving its replacement in; it is complete, so it is put back.
    """
    for p in root.iterdir():
        if p.name.startswith(TMP_PREFIX):
            shutil.rmtree(p, ignore_errors=True)
    for p in root.iterdir():
        if p.name.startswith(OLD_PREFIX):
            name = p.name[len(OLD_PREFIX) :].rsplit("-", 1)[0]
            target = root / name
            if _CKPT_RE.match(name) and not target.exists() and (p / STATE_FILE).is_file():
                os.rename(p, target)
            else:
                shutil.rmtree(p, ignore_errors=True)


def remove_dir_safely(path: Path) -> None:
    """Delete a checkpoint dir by first renaming it to a hidden name, so it vanishes atomically."""
    doomed = path.parent / f"{TMP_PREFIX}del-{path.name}-{os.getpid()}"
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


# ---------------------------------------------------------------------------
# save
# ---------------------------------------------------------------------------


def _prepare_tensors(stem: str, sd: dict[str, Any]) -> dict[str, Any]:
    """Detach/CPU/contiguous copies; clone tensors whose storage was already used (safetensors forbids sharing)."""
    import torch

    out, seen = {}, set()
    for key, t in sd.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"checkpoint tensors[{stem!r}][{key!r}] is a {type(t).__name__}, expected a torch.Tensor")
        t = t.detach().cpu().contiguous()
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(
                f"checkpoint tensors[{stem!r}][{key!r}] holds non-finite values; not saving a corrupt state "
                "(a diverged run: lower the learning rate or check the reward's scale)"
            )
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[key] = t
    return out


def _write_contents(
    tmp: Path,
    epoch: int,
    tensors: dict[str, dict[str, Any]],
    optimizer_state: dict | None,
    state: dict[str, Any],
) -> None:
    """Write all checkpoint files into ``tmp`` (state.json last) and fsync them."""
    import torch
    from safetensors.torch import save_file

    payload = dict(state)
    payload.setdefault("epoch", int(epoch))
    try:
        json.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"checkpoint state for epoch {epoch} is not JSON-serialisable ({exc}); "
            "convert tensors/arrays with .tolist() and objects to dicts (rng_state() is already JSON-safe)"
        ) from exc
    if optimizer_state is not None:
        _check_finite_state(optimizer_state, "optimizer state")

    written = []
    for stem, sd in tensors.items():
        if not _STEM_RE.match(stem):
            raise ValueError(
                f"checkpoint tensor file stem {stem!r} must match {_STEM_RE.pattern} (e.g. 'model', 'ema')"
            )
        path = tmp / f"{stem}{TENSOR_SUFFIX}"
        save_file(_prepare_tensors(stem, sd), str(path), metadata={"format": "pt"})
        written.append(path)
    if optimizer_state is not None:
        path = tmp / OPTIMIZER_FILE
        torch.save(optimizer_state, path)
        written.append(path)
    for path in written:
        _fsync_file(path)
    payload[FILES_KEY] = {path.name: path.stat().st_size for path in written}
    state_path = tmp / STATE_FILE
    with open(state_path, "w", encoding="utf-8") as f:
        f.write(json.dumps(payload, indent=1))
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)


def _check_finite_state(obj: Any, where: str) -> None:
    """NonFiniteError if any floating tensor nested in ``obj`` (dicts, lists) holds NaN or inf."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and not bool(torch.isfinite(obj).all()):
            raise NonFiniteError(f"{where} holds non-finite values; not saving a corrupt state")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _check_finite_state(value, f"{where}[{key!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _check_finite_state(value, f"{where}[{i}]")


def move_into_place(tmp: Path, final: Path) -> None:
    """Rename the complete directory ``tmp`` to ``final``, atomically for readers: an existing ``final`` is moved
    aside first (rolled back if the rename fails) and deleted after; the parent directory entry is fsynced.
    Every write of a run directory that must never be half-done (checkpoints, ``final/``) ends with it."""
    if not final.exists():
        os.replace(tmp, final)
        fsync_dir(final.parent)
        return
    old = final.parent / f"{OLD_PREFIX}{final.name}-{os.getpid()}"
    if old.exists():
        shutil.rmtree(old)
    os.rename(final, old)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.rename(old, final)  # roll back: the previous version stays valid
        raise
    fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    run_dir: PathLike,
    epoch: int,
    *,
    tensors: dict[str, dict[str, Any]],
    optimizer_state: dict | None,
    state: dict[str, Any],
    keep_last: int | None = None,
) -> Path:
    """Atomically write ``<run_dir>/checkpoints/epoch_{epoch:06d}`` and prune old ones.

    Args:
        tensors: file stem -> state dict, e.g. ``{"model": lora_sd, "ema": ema_sd}``.
        optimizer_state: ``optimizer.state_dict()`` or ``None``.
        state: JSON-serialisable trainer state (``epoch`` is added if missing).
        keep_last: keep only the newest ``keep_last`` complete checkpoints (``None``/0: keep all).

    Returns the final checkpoint directory.
    """
    if keep_last is not None and keep_last < 0:
        raise ValueError(f"keep_last must be None, 0 (keep all) or positive, got {keep_last}")
    root = Path(run_dir) / CHECKPOINTS_DIRNAME
    root.mkdir(parents=True, exist_ok=True)
    _cleanup_leftovers(root)
    name = ckpt_name(epoch)
    tmp = root / f"{TMP_PREFIX}{name}-{os.getpid()}"
    tmp.mkdir()
    try:
        _write_contents(tmp, epoch, tensors, optimizer_state, state)
        final = root / name
        move_into_place(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # best effort; a hard crash leaves it for the next save
        raise
    if keep_last:
        for old in list_checkpoints(root)[:-keep_last]:
            remove_dir_safely(old)
    return final


# ---------------------------------------------------------------------------
# find / load
# ---------------------------------------------------------------------------


def find_checkpoint(path: PathLike) -> Path:
    """Resolve ``path`` to a checkpoint dir.

    Accepts a checkpoint dir (contains ``state.json``), a run dir (-> its newest
    complete ``checkpoints/epoch_*``) or a ``checkpoints/`` dir.
    """
    p = Path(path).expanduser()
    expected = (
        "pass a checkpoint dir (containing state.json), a run dir (containing checkpoints/), or a checkpoints/ dir"
    )
    if not p.exists():
        raise FileNotFoundError(f"checkpoint path {str(p)!r} does not exist; {expected}")
    if not p.is_dir():
        raise ValueError(f"checkpoint path {str(p)!r} is a file, not a directory; {expected}")
    if (p / STATE_FILE).is_file():
        return p
    if _CKPT_RE.match(p.name) or p.name.startswith((TMP_PREFIX, OLD_PREFIX)):
        raise ValueError(f"checkpoint dir {str(p)!r} has no {STATE_FILE}: it is incomplete; use an earlier checkpoint")
    found = list_checkpoints(p)
    if not found:
        raise FileNotFoundError(
            f"no complete checkpoints (epoch_XXXXXX/{STATE_FILE}) found under {str(p)!r}; {expected}"
        )
    return found[-1]


def load_checkpoint(ckpt_dir: PathLike) -> dict[str, Any]:
    """Load a checkpoint (any path accepted by :func:`find_checkpoint`).

    Returns ``{"tensors": {stem: state dict}, "optimizer_state": dict | None, "state": dict, "path": Path}``.
    Tensors are loaded to CPU. Raises :class:`CorruptCheckpointError` naming the file that is missing,
    truncated (its size differs from the one recorded at save time) or unreadable.
    """
    import torch
    from safetensors.torch import load_file

    d = find_checkpoint(ckpt_dir)
    state_path = d / STATE_FILE
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CorruptCheckpointError(d, STATE_FILE, f"invalid JSON at line {exc.lineno} ({exc.msg})") from exc
    files = state.pop(FILES_KEY, None)  # checkpoints written before the manifest have none
    for name, size in (files or {}).items():
        if not (d / name).is_file():
            raise CorruptCheckpointError(d, name, "missing")
        if (d / name).stat().st_size != size:
            raise CorruptCheckpointError(
                d, name, f"truncated or altered ({(d / name).stat().st_size} bytes, {size} when saved)"
            )
    tensors = {}
    for f in sorted(d.glob(f"*{TENSOR_SUFFIX}")):
        try:
            tensors[f.name[: -len(TENSOR_SUFFIX)]] = load_file(str(f), device="cpu")
        except Exception as exc:  # safetensors raises its own error type for a damaged header or body
            raise CorruptCheckpointError(d, f.name, f"unreadable ({type(exc).__name__}: {exc})") from exc
    opt_path = d / OPTIMIZER_FILE
    optimizer_state = None
    if opt_path.is_file():
        try:
            optimizer_state = torch.load(opt_path, map_location="cpu", weights_only=True)
        except Exception as exc:  # EOFError, RuntimeError, UnpicklingError for a damaged file
            raise CorruptCheckpointError(d, OPTIMIZER_FILE, f"unreadable ({type(exc).__name__}: {exc})") from exc
    return {"tensors": tensors, "optimizer_state": optimizer_state, "state": state, "path": d}


def load_latest(path: PathLike, log=print) -> dict[str, Any]:
    """:func:`load_checkpoint` of ``path``; for a run (or ``checkpoints/``) directory whose newest checkpoint
    is corrupt, fall back to the previous complete one, logging which file was wrong.

    A checkpoint holding non-finite weights is refused (:class:`NonFiniteError`).
    """
    p = Path(path).expanduser()
    candidates = [find_checkpoint(p)] if (p / STATE_FILE).is_file() else list(reversed(list_checkpoints(p)))
    if not candidates:
        find_checkpoint(p)  # raises the "no complete checkpoints" error with its explanation
    for i, candidate in enumerate(candidates):
        try:
            loaded = load_checkpoint(candidate)
        except CorruptCheckpointError as exc:
            if i + 1 == len(candidates):
                raise
            log(f"{exc}; falling back to the previous checkpoint {candidates[i + 1].name}")
            continue
        for stem, sd in loaded["tensors"].items():
            bad = [k for k, t in sd.items() if t.is_floating_point() and not bool(t.isfinite().all())]
            if bad:
                raise NonFiniteError(
                    f"checkpoint {candidate}: {stem}{TENSOR_SUFFIX} holds non-finite values "
                    f"({bad[0]!r}); resume from an earlier checkpoint of the run"
                )
        return loaded
    raise AssertionError("unreachable")
