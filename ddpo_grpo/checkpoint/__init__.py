"""Checkpoints and a run's state.

files.py        atomic checkpoint directories (write to a hidden sibling, fsync, move into place), finding the
newest complete one, loading with size checks, refusing non-finite tensors
rng.py          the RNG state of a process
state_dicts.py  loading a state dict whose keys do not match exactly, with a report
run_state.py    ``RunState``: what a training run saves, how it resumes, the export to ``final/``
"""

from ddpo_grpo.checkpoint.files import (
    CHECKPOINTS_DIRNAME,
    OPTIMIZER_FILE,
    STATE_FILE,
    TENSOR_SUFFIX,
    CorruptCheckpointError,
    NonFiniteError,
    find_checkpoint,
    fsync_tree,
    leftovers,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    move_into_place,
    save_checkpoint,
)
from ddpo_grpo.checkpoint.rng import rng_state, set_rng_state
from ddpo_grpo.checkpoint.run_state import RunState, final_manifest
from ddpo_grpo.checkpoint.state_dicts import load_state_dict_checked

__all__ = [
    "CHECKPOINTS_DIRNAME",
    "OPTIMIZER_FILE",
    "STATE_FILE",
    "TENSOR_SUFFIX",
    "CorruptCheckpointError",
    "NonFiniteError",
    "RunState",
    "final_manifest",
    "find_checkpoint",
    "fsync_tree",
    "leftovers",
    "list_checkpoints",
    "load_checkpoint",
    "load_latest",
    "load_state_dict_checked",
    "move_into_place",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
