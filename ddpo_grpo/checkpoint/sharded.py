"""Sharded checkpoints of an FSDP run (``torch.distributed.checkpoint``), as atomic as the single-file ones.

Layout of ``<run>/checkpoints/epoch_XXXXXX/`` when the run is sharded over P processes::

    .metadata, __<rank>_0.distcp   DCP's files: every process writes its own shards of the trainable weights, the
                                   optimizer state and the EMA / sampler / reference copies (``tensors``)
    rng_rank<r>.json               each process's RNG state
    state.json                     written last, by the main process: the run's state, ``sharded: true``, the world
                                   size, and every other file's size (``files.FILES_KEY``)

Saving: every process writes into the hidden sibling ``.tmp-epoch_XXXXXX-sharded`` (the same name everywhere);
after a barrier the main process checks the files, writes state.json and moves the directory into place
(``files.move_into_place``), then prunes old checkpoints. A crash at any point, of any process (``kill -9``
included), leaves the previous checkpoint the newest complete one, and the run resumes from it bit-identically
(``tests/test_kill_resume.py``; the next start removes the hidden leftover). The barriers and DCP's planning
messages run on the host-side process group (``distributed.host_group``: gloo beside NCCL). Nothing non-finite is written: every process checks its own shards and all of them refuse
together. Loading needs the same world size (the data layout and the RNG streams are per process); another size
is refused in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import torch

from ddpo_grpo import distributed
from ddpo_grpo.checkpoint.files import (
    CHECKPOINTS_DIRNAME,
    FILES_KEY,
    STATE_FILE,
    TMP_PREFIX,
    CorruptCheckpointError,
    NonFiniteError,
    ckpt_name,
    fsync_dir,
    fsync_tree,
    list_checkpoints,
    move_into_place,
    remove_dir_safely,
)
from ddpo_grpo.checkpoint.rng import rng_state, set_rng_state
from foundation.errors import ConfigError

#: a test hook (tests/test_kill_resume.py): "RANK:EPOCH" stops that process inside the save of that epoch, after its
#: shards are written and before anything is committed: it writes its pid to ``halted_rank<RANK>`` in the hidden
#: directory and sleeps there until it is killed. Unset in every real run.
HALT_ENV = "DDPO_GRPO_HALT_IN_SAVE"


def _nonfinite(tree, where: str = "") -> str | None:
    """The first place in ``tree`` (nested dicts of tensors) whose own part holds a NaN / inf, or None."""
    from ddpo_grpo.sharding import local

    if isinstance(tree, torch.Tensor):
        t = local(tree)
        return where if t.is_floating_point() and not bool(torch.isfinite(t).all()) else None
    if isinstance(tree, dict):
        for key, value in tree.items():
            found = _nonfinite(value, f"{where}[{key!r}]")
            if found:
                return found
    return None


def save_sharded(run_dir, epoch: int, tensors: dict, state: dict, *, rank: int, world: int, keep_last=None) -> Path:
    """Every process calls this with its shards (module docstring); returns the checkpoint directory."""
    import torch.distributed.checkpoint as dcp

    bad = _nonfinite(tensors, "tensors")
    if not distributed.all_processes(bad is None):
        raise NonFiniteError(
            f"checkpoint of epoch {epoch}: {bad or 'a shard on another process'} holds non-finite values; not saving "
            "a corrupt state (a diverged run: lower the learning rate or check the reward's scale)"
        )
    root = Path(run_dir) / CHECKPOINTS_DIRNAME
    name = ckpt_name(epoch)
    tmp = root / f"{TMP_PREFIX}{name}-sharded"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    distributed.barrier()
    dcp.save(tensors, checkpoint_id=str(tmp), process_group=distributed.host_group())
    (tmp / f"rng_rank{rank}.json").write_text(json.dumps(rng_state()))
    _halt_if_asked(tmp, rank, epoch)
    distributed.barrier()
    final = root / name
    if rank == 0:
        fsync_tree(tmp)
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        payload = {**state, "epoch": int(epoch), "sharded": True, "world_size": world, FILES_KEY: files}
        with open(tmp / STATE_FILE, "w", encoding="utf-8") as f:
            f.write(json.dumps(payload, indent=1))
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(tmp)
        move_into_place(tmp, final)
        if keep_last:
            for old in list_checkpoints(root)[:-keep_last]:
                remove_dir_safely(old)
    distributed.barrier()
    return final


def _halt_if_asked(tmp: Path, rank: int, epoch: int) -> None:
    """The ``HALT_ENV`` test hook: sleep here (to be killed) when it names this process and epoch."""
    if os.environ.get(HALT_ENV) == f"{rank}:{epoch}":
        (tmp / f"halted_rank{rank}").write_text(str(os.getpid()))
        time.sleep(3600)


def load_sharded(path: Path, tensors: dict, *, rank: int, world: int) -> dict:
    """Fill ``tensors`` (the same structure ``save_sharded`` got, this run's shards) in place from checkpoint ``path``,
    restore this process's RNG and return the run's state (state.json)."""
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    saved_world = state.get("world_size")
    if saved_world != world:
        raise ConfigError(
            f"resume_from: checkpoint {path} was written by {saved_world} processes and this run has {world}; a "
            f"sharded run resumes with the same number (its data layout and random streams are per process): "
            f"launch it with --nproc_per_node {saved_world} (× nodes), or start a new run from its final/"
        )
    for file, size in state.pop(FILES_KEY, {}).items():
        if not (path / file).is_file():
            raise CorruptCheckpointError(path, file, "missing")
        if (path / file).stat().st_size != size:
            raise CorruptCheckpointError(path, file, f"truncated or altered ({(path / file).stat().st_size} bytes)")
    with torch.no_grad():
        dcp.load(tensors, checkpoint_id=str(path), process_group=distributed.host_group())
    set_rng_state(json.loads((path / f"rng_rank{rank}.json").read_text(encoding="utf-8")))
    return state


__all__ = ["load_sharded", "save_sharded"]
