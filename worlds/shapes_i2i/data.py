"""The shipped rows of both worlds, their images, and the prompt sources.

Splits (``data/{restore,edit}_{train,test}.jsonl``, JSON rows without images, regenerated from
:data:`SPLIT_SEED` by :func:`make_split`; ``python -m worlds.shapes_i2i split --check`` verifies them):

* restoration (:mod:`.restore`): per kind, 32 rows per train level (256 train rows) from ShapesWorld
  *train* prompts; 16 rows per level, the held-out level included, from ShapesWorld *test* prompts
  (192 test rows). Prompts are drawn task-balanced (a ShapesWorld task, then a prompt of it);
* editing (:mod:`.edit`): 128 train and 48 test rows per edit type (512 / 192). An edit is *test* iff
  its source or its target caption is a ShapesWorld *test* prompt (a held-out colour–shape pair in a
  two-object or position caption, or a held-out single object): the compositions the base text-to-image
  model never saw are never edited into or out of in training.

:func:`with_images` adds each row's ``source_image`` and ``ground_truth`` (uint8 ``[3, 64, 64]`` numpy
arrays, read-only; the adapter and the ``psnr`` / ``ssim`` rewards read them as they read paths or nested
lists) and an ``id``. Restoration: the clean render is the ground truth and its degradation (noise from the
row's ``noise_seed``) the source. Editing: the source scene's render and one valid target's render.
The prompt sources (entry points) return such rows: ``shapes_restore_{train,test}``,
``shapes_edit_{train,test}`` and ``shapes_i2i_{train,test}`` (both worlds).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ddpo_grpo.split_files import read_rows, write_rows
from worlds.shapes.grammar import constraints_of, load_split, split_of
from worlds.shapes.world import TASKS

from .edit import EDIT_TYPES, edit_row, make_edit
from .restore import KINDS, levels, restore_row
from .scenes import constraints, from_rows, render_chw

SPLIT_SEED = 0
DATA_DIR = Path(__file__).resolve().parent / "data"
WORLDS = ("restore", "edit")
SPLITS = ("train", "test")
RESTORE_PER_LEVEL = {"train": 32, "test": 16}
EDIT_PER_TYPE = {"train": 128, "test": 48}


def edit_split(edit: dict) -> str:
    """``"test"`` iff the edit's source or target caption is a ShapesWorld test prompt."""
    src = constraints(edit["source"])
    tgt = constraints(edit["target"], edit["relation"])
    return "test" if "test" in (split_of(src), split_of(tgt)) else "train"


def shape_rows_by_task(split: str) -> dict[str, list[dict]]:
    rows = load_split(split)
    return {t: [r for r in rows if r["task"] == t] for t in TASKS}


def sample_shape_row(by_task: dict[str, list[dict]], rng: np.random.Generator) -> dict:
    """A ShapesWorld prompt row: a task uniformly, then a prompt of that task uniformly."""
    rows = by_task[TASKS[int(rng.integers(len(TASKS)))]]
    return rows[int(rng.integers(len(rows)))]


def sample_edit(kind: str, split: str, rng: np.random.Generator) -> dict:
    """A random edit of ``kind`` whose split is ``split`` (rejection sampling)."""
    while True:
        edit = make_edit(kind, rng)
        if edit_split(edit) == split:
            return edit


def make_split(seed: int = SPLIT_SEED) -> dict[str, dict[str, list[dict]]]:
    """``{world: {split: rows}}`` (see the module docstring); deterministic in ``seed``."""
    out: dict[str, dict[str, list[dict]]] = {"restore": {}, "edit": {}}
    for split in SPLITS:
        rng = np.random.default_rng([seed, 0, SPLITS.index(split)])
        by_task = shape_rows_by_task(split)
        rows = []
        for kind in KINDS:
            held = levels(kind, "train")
            for level in levels(kind, split):
                for _ in range(RESTORE_PER_LEVEL[split]):
                    rows.append(
                        restore_row(
                            sample_shape_row(by_task, rng),
                            kind,
                            level,
                            int(rng.integers(2**31)),
                            held_out=level not in held,
                        )
                    )
        out["restore"][split] = rows
        rng = np.random.default_rng([seed, 1, SPLITS.index(split)])
        out["edit"][split] = [
            edit_row(sample_edit(kind, split, rng)) for kind in EDIT_TYPES for _ in range(EDIT_PER_TYPE[split])
        ]
    return out


def split_path(world: str, split: str) -> Path:
    if world not in WORLDS or split not in SPLITS:
        raise ValueError(f"unknown split {world!r}/{split!r}; worlds {WORLDS}, splits {SPLITS}")
    return DATA_DIR / f"{world}_{split}.jsonl"


def write_split(out_dir: Path | None = None, seed: int = SPLIT_SEED) -> list[Path]:
    """Write ``{world}_{split}.jsonl`` (one JSON object per line, each file replaced atomically) into ``out_dir``."""
    out_dir = DATA_DIR if out_dir is None else Path(out_dir)
    return [
        write_rows(out_dir / f"{world}_{split}.jsonl", rows)
        for world, splits in make_split(seed).items()
        for split, rows in splits.items()
    ]


@functools.cache
def _load(world: str, split: str) -> tuple[dict, ...]:
    rows = read_rows(split_path(world, split), "`python -m worlds.shapes_i2i split --write`")
    return tuple(with_images(r, f"{world}/{split}/{i:04d}") for i, r in enumerate(rows))


def images(row: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(source_image, ground_truth)`` of a JSON row, uint8 ``[3, 64, 64]`` each (deterministic)."""
    import torch

    from worlds.shapes_i2i.degradations import degrade

    if row.get("task") == "restore":
        clean = render_chw(from_rows(row["scene"]))
        x = torch.from_numpy(clean).float().div(255.0)[None]
        gen = torch.Generator().manual_seed(int(row["noise_seed"]))
        y = degrade(x, row["degradation"], generator=gen)[0]
        source = (y * 255.0).round().clamp(0, 255).to(torch.uint8).numpy()
        return source, clean
    if row.get("task") == "edit":
        return render_chw(from_rows(row["source_scene"])), render_chw(from_rows(row["target_scene"]))
    raise ValueError(f"row {row.get('prompt')!r}: task must be 'restore' or 'edit', got {row.get('task')!r}")


def with_images(row: dict, row_id: str) -> dict:
    source, truth = images(row)
    source.setflags(write=False)
    truth.setflags(write=False)
    return {**row, "id": row_id, "source_image": source, "ground_truth": truth}


def rows(world: str, split: str) -> list[dict]:
    """The shipped rows of ``world`` ("restore", "edit" or "i2i" = both) and ``split``, with their images."""
    worlds = WORLDS if world == "i2i" else (world,)
    return [dict(r) for w in worlds for r in _load(w, split)]


def restore_train() -> list[dict]:
    return rows("restore", "train")


def restore_test() -> list[dict]:
    return rows("restore", "test")


def edit_train() -> list[dict]:
    return rows("edit", "train")


def edit_test() -> list[dict]:
    return rows("edit", "test")


def i2i_train() -> list[dict]:
    return rows("i2i", "train")


def i2i_test() -> list[dict]:
    return rows("i2i", "test")


def check(seed: int = SPLIT_SEED) -> list[str]:
    """Differences between the shipped files and :func:`make_split` (``[]`` = identical), and rule violations."""
    problems = []
    for world, splits in make_split(seed).items():
        for split, rows_ in splits.items():
            path = split_path(world, split)
            shipped = read_rows(path) if path.is_file() else None
            if shipped != rows_:
                problems.append(f"{path.name} differs from make_split({seed}); regenerate with --write")
    for r in rows("edit", "train"):
        src = constraints_of(r["source_caption"])
        if split_of(src) == "test" or split_of(constraints_of(r["target"])) == "test":
            problems.append(f"edit train row {r['id']} touches a held-out composition")
    return problems
