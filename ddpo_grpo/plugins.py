"""Named extensions from installed packages: how the embedded worlds and users' packages plug in.

The core never imports a world. A package offers a reward factory or a prompt source under a name by
declaring an entry point in its metadata (``pyproject.toml``), e.g.::

    [project.entry-points."ddpo_grpo.rewards"]
    shapes = "worlds.shapes.reward:shapes"            # factory(**kwargs) -> fn(samples, prompts, metadata)

    [project.entry-points."ddpo_grpo.prompt_sources"]
    shapes_train = "worlds.shapes.grammar:train_rows"  # () -> list of {"prompt": ..., ...} rows

and ``reward.fns = {"shapes": 1.0}`` or ``prompts.source = "shapes_train"`` then finds it. A name is
looked up here only when the core's own registries do not know it, and the providing module is
imported only then.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

#: kind -> entry-point group
GROUPS = {"rewards": "ddpo_grpo.rewards", "prompt_sources": "ddpo_grpo.prompt_sources"}


def _entries(kind: str) -> dict[str, EntryPoint]:
    if kind not in GROUPS:
        raise ValueError(f"unknown plug-in kind {kind!r}; kinds: {', '.join(GROUPS)}")
    return {ep.name: ep for ep in entry_points(group=GROUPS[kind])}


def names(kind: str) -> list[str]:
    """Sorted names offered for ``kind`` ("rewards" or "prompt_sources") by installed packages."""
    return sorted(_entries(kind))


def load(kind: str, name: str):
    """The object registered as ``name`` for ``kind``, or None when no installed package offers it.

    Raises RuntimeError naming the entry point when its module cannot be imported.
    """
    ep = _entries(kind).get(name)
    if ep is None:
        return None
    try:
        return ep.load()
    except Exception as exc:
        raise RuntimeError(f"{kind} plug-in {name!r} ({ep.value}) could not be loaded: {exc}") from exc
