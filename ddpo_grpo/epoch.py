"""An epoch's data, laid out once by the sample phase and read (never recomputed) by the later phases."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpo_grpo.rollout import Rollout


@dataclass(frozen=True)
class Epoch:
    """The epoch's prompt rows, this process's share of them and (once sampled) the rollouts and pending scores.

    Groups are laid out contiguously in a global list of images_per_epoch items (group g's members are items
    g·size … (g + 1)·size − 1), and process r takes the r-th contiguous slice, so a group may span batches and
    processes. How samples are grouped for their advantages is the advantage phase's (``advantages.sample_keys``).
    """

    index: int
    rows: list  # the epoch's prompt rows, one per group (the same on every process)
    items: list  # this process's (group, member) items, in sample order
    rollout: Rollout | None = None  # this process's samples (None before sampling and in supervised-only epochs)
    pending: list = field(default_factory=list)  # per sampling batch: its scores, or a Future of them

    @classmethod
    def lay_out(cls, index: int, rows: list, *, group_size: int, rank: int, per_process: int) -> Epoch:
        """Process ``rank``'s ``per_process`` consecutive (group, member) items of ``rows``' groups of ``group_size``."""
        items = [(g, m) for g in range(len(rows)) for m in range(group_size)]
        return cls(index, rows, items[rank * per_process : (rank + 1) * per_process])
