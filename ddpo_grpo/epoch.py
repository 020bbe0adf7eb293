"""An epoch's data, laid out once by the sample phase and read (never recomputed) by the later phases."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpo_grpo.advantages import group_keys
from ddpo_grpo.rollout import Rollout


@dataclass(frozen=True)
class Epoch:
    """The epoch's prompt rows, this process's share of them, the groups' keys, and (once sampled) the rollouts.

    Groups are laid out contiguously in a global list of images_per_epoch items (group g's members are items
    g·size … (g + 1)·size − 1), and process r takes the r-th contiguous slice, so a group may span batches and
    processes. A group is one row: its prompt, or its ``id`` where rows share a prompt (image-conditioned data).
    """

    index: int
    rows: list  # the epoch's prompt rows, one per group (the same on every process)
    items: list  # this process's (group, member) items, in sample order
    keys: list  # the stat tracker's key of every sample of the epoch, all processes (advantages.group_keys)
    rollout: Rollout | None = None  # this process's samples (None before sampling and in supervised-only epochs)
    pending: list = field(default_factory=list)  # per sampling batch: its scores, or a Future of them

    @classmethod
    def lay_out(
        cls, index: int, rows: list, *, group_size: int, rank: int, per_process: int, adv_mode: str, shared_noise: bool
    ) -> Epoch:
        items = [(g, m) for g in range(len(rows)) for m in range(group_size)]
        ids = [str(r.get("id", r["prompt"])) for r in rows]
        keys = group_keys(ids, group_size, adv_mode, shared_noise)
        return cls(index, rows, items[rank * per_process : (rank + 1) * per_process], keys)
