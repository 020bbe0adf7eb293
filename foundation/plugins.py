"""Code that is not the core's: named extensions of installed packages, and users' own files.

Part of the foundation package: it imports neither the core nor the rewards, and both import it.

The core never imports a world. A package offers a reward factory or a prompt source under a name by
declaring an entry point in its metadata (``pyproject.toml``), e.g.::

    [project.entry-points."ddpo_grpo.rewards"]
    shapes = "worlds.shapes.reward:shapes"            # factory(**kwargs) -> fn(samples, prompts, metadata)

    [project.entry-points."ddpo_grpo.prompt_sources"]
    shapes_train = "worlds.shapes.grammar:train_rows"  # () -> list of {"prompt": ..., ...} rows

and ``reward.fns = {"shapes": 1.0}`` or ``prompts.source = "shapes_train"`` then finds it. A name is
looked up here only when the core's own registries do not know it, and the providing module is
imported only then.

Two more kinds serve the scripts (``scripts/sample.py``, ``scripts/evaluate.py``), each entry point named for a
kind of decoded samples::

    [project.entry-points."ddpo_grpo.sample_kinds"]        # a ddpo_grpo.sample_kinds.SampleKind:
    motion = "worlds.motion.extras:SAMPLE_KIND"             #   recognises its pipelines and batches, writes a sample

    [project.entry-points."ddpo_grpo.evaluation_extras"]   # a ddpo_grpo.evaluation_extras.EvaluationExtras:
    motion = "worlds.motion.extras:EVALUATION"              #   default prompts / rewards, extra metrics, a table

and one serves the policies' family registry (``ddpo_grpo/policies/family.py``), each entry point named for a family::

    [project.entry-points."ddpo_grpo.families"]            # a ddpo_grpo.policies.FamilySpec of that name:
    my_family = "my_package.adapter:SPEC"                   #   a pipeline class, its adapter, its tiny builder
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

#: kind -> entry-point group
GROUPS = {
    "rewards": "ddpo_grpo.rewards",
    "prompt_sources": "ddpo_grpo.prompt_sources",
    "sample_kinds": "ddpo_grpo.sample_kinds",
    "evaluation_extras": "ddpo_grpo.evaluation_extras",
    "families": "ddpo_grpo.families",
}
#: prefix of the module names under which `import_user_file` registers user files
USER_MODULE_PREFIX = "_ddpo_user_"


def _entries(kind: str) -> dict[str, EntryPoint]:
    if kind not in GROUPS:
        raise ValueError(f"unknown plug-in kind {kind!r}; kinds: {', '.join(GROUPS)}")
    return {ep.name: ep for ep in entry_points(group=GROUPS[kind])}


def names(kind: str) -> list[str]:
    """Sorted names offered for ``kind`` (a key of :data:`GROUPS`) by installed packages."""
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


def load_checked(kind: str, name: str, cls: type, what: str, *, named: bool = True):
    """:func:`load`, refused with a ValueError naming the entry point unless the object is a ``cls`` (``what``: the
    class as the message names it) and, with ``named``, its ``name`` is the entry point's."""
    obj = load(kind, name)
    if not isinstance(obj, cls) or (named and obj.name != name):
        wanted = f"{what} named {name!r}" if named else what
        raise ValueError(f"{kind} plug-in {name!r} is {obj!r}; it must be a {wanted}")
    return obj


def import_user_file(path: str | os.PathLike, module_name: str | None = None) -> ModuleType:
    """Import a Python file as a module registered in ``sys.modules`` (once per file; later calls reuse it).

    The name is ``_ddpo_user_<stem>_<hash of the absolute path>`` unless given, so that classes defined in the
    file can be named in a model_index.json and found again by diffusers' loader (see ``user_modules``).
    """
    file = Path(os.path.expanduser(str(path))).resolve()
    if not file.is_file():
        raise ValueError(f"{str(path)!r} is not a file (cwd: {os.getcwd()}); give the path of a .py file")
    if module_name is None:
        digest = hashlib.sha1(str(file).encode()).hexdigest()[:8]
        module_name = f"{USER_MODULE_PREFIX}{file.stem.replace('-', '_').replace('.', '_')}_{digest}"
    loaded = sys.modules.get(module_name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == file:
        return loaded
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {str(file)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # surface the user file's error with context
        del sys.modules[module_name]
        raise RuntimeError(f"importing {str(file)!r} failed: {exc}") from exc
    return module


def trusted_packages() -> set[str]:
    """Top-level packages whose modules a pipeline directory may name for import.

    ddpo_grpo, and every package that registers a ddpo_grpo plug-in (an entry point of
    ``foundation.plugins.GROUPS``): installed code that declared itself part of this toolkit — never code
    shipped inside a model directory.
    """
    roots = {"ddpo_grpo"}
    for group in GROUPS.values():
        roots.update(ep.value.split(":")[0].split(".")[0] for ep in entry_points(group=group))
    return roots
