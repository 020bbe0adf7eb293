"""Deliberate near-copies, kept honest: every block marked as a copy must equal its source after the declared renames.

A copy is marked on the line directly above it (above its decorators, if any), as diffusers marks its copies:

    # Copied from tests.test_adapter_kit.kit_config
    # Copied from tests.test_adapter_kit.write_prompts with tmp_path->directory, PROMPTS->TEXTS

The source is ``<module>.<name>``: a module of this repository by its dotted path (``a/b.py`` or
``a/b/__init__.py``) and a top-level function, class or assignment in it, or ``Class.method``. The copied block is a
``def``, ``class`` or assignment (with its decorators). ``with A->B, C->D`` declares renames: each ``A`` of the
source's text becomes ``B`` (plain text replacement, in the order given; ``A`` and ``B`` hold no comma and no
``->``, spaces inside them are kept) before the comparison; the two blocks are
compared with their own indentation removed, so a function may be copied into a class or out of one.

    python .ci/check_copies.py          # exit 1 and a unified diff per copy that drifted from its source
    python .ci/check_copies.py --fix    # overwrite each drifted copy with its source (after the renames)

tests/test_copies.py runs the check on the repository, so CI fails on a copy that drifted.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import re
import subprocess
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(?P<indent>\s*)# Copied from (?P<source>[\w.]+)(?: with (?P<renames>.+?))?\s*$")
RENAME = re.compile(r"^\s*(?P<old>.+?)->(?P<new>.+?)\s*$")


@dataclass
class Copy:
    """One marked copy: where it is, the block's lines (0-based, end exclusive), its source and renames."""

    path: Path
    marker_line: int
    start: int
    end: int
    source: str
    renames: list[tuple[str, str]]


def _renames(text: str | None, where: str) -> list[tuple[str, str]]:
    out = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        match = RENAME.match(part)
        if match is None:
            raise ValueError(f"{where}: rename {part.strip()!r} is not of the form A->B")
        out.append((match["old"], match["new"]))
    return out


def _block(nodes, line: int) -> tuple[int, int] | None:
    """(start, end) 0-based lines of the def / class / assignment whose first line (decorators included) is
    ``line`` (1-based), searched through ``nodes`` and the bodies of classes and functions."""
    for node in nodes:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if first == line:
            return first - 1, node.end_lineno
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno < line:
            found = _block(node.body, line)
            if found:
                return found
    return None


def find_copies(path: Path) -> list[Copy]:
    """The marked copies of one file; ValueError when a marker is not directly above a def, class or assignment."""
    text = path.read_text(encoding="utf-8")
    if "# Copied from " not in text:
        return []
    lines = text.splitlines()
    tree = ast.parse(text)
    comments = {
        t.start[0] - 1 for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT
    }
    copies = []
    for i, line in enumerate(lines):
        match = MARKER.match(line) if i in comments else None  # a comment line, not text inside a string
        if match is None:
            continue
        where = f"{path}:{i + 1}"
        block = _block(tree.body, i + 2)
        if block is None:
            raise ValueError(
                f"{where}: a '# Copied from' marker must be the line right above a def, class or assignment"
            )
        copies.append(Copy(path, i, *block, match["source"], _renames(match["renames"], where)))
    return copies


def _module_file(module: str, root: Path) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def source_text(source: str, root: Path, where: str) -> str:
    """The text of ``<module>.<name>`` (``name`` may be ``Class.method``): the longest module prefix that is a file."""
    parts = source.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        file = _module_file(".".join(parts[:cut]), root)
        if file is None:
            continue
        nodes, names = ast.parse(file.read_text(encoding="utf-8")).body, parts[cut:]
        node = None
        for name in names:
            node = next((n for n in nodes if name in _names(n)), None)
            if node is None:
                break
            nodes = getattr(node, "body", [])
        if node is None:
            raise ValueError(f"{where}: {file.relative_to(root)} has no {'.'.join(names)} (the copy's source)")
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "\n".join(file.read_text(encoding="utf-8").splitlines()[first - 1 : node.end_lineno])
    raise ValueError(f"{where}: no module of {source!r} in {root} (the copy's source: <module>.<name>)")


def _names(node) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def expected(copy: Copy, root: Path) -> str:
    """The copy's text as its source says it must read: the source with the renames applied, dedented."""
    text = textwrap.dedent(source_text(copy.source, root, f"{copy.path}:{copy.marker_line + 1}"))
    for old, new in copy.renames:
        text = text.replace(old, new)
    return text


def check(paths, root: Path = REPO, fix: bool = False) -> list[str]:
    """One message (with a unified diff) per marked copy in ``paths`` that differs from its source; with ``fix``
    the copy is rewritten from the source (its indentation kept) and the message says so."""
    problems = []
    for path in paths:
        path = Path(path)
        for copy in reversed(find_copies(path)):  # bottom-up, so a fix keeps the earlier copies' line numbers
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            block = "".join(lines[copy.start : copy.end])
            indent = re.match(r"\s*", lines[copy.start])[0]
            want = expected(copy, root)
            if textwrap.dedent(block).rstrip("\n") == want.rstrip("\n"):
                continue
            name = f"{path.relative_to(root) if path.is_relative_to(root) else path}:{copy.start + 1}"
            diff = difflib.unified_diff(
                want.splitlines(), textwrap.dedent(block).splitlines(), f"{copy.source} (renamed)", name, lineterm=""
            )
            if fix:
                lines[copy.start : copy.end] = [textwrap.indent(want.rstrip("\n") + "\n", indent)]
                path.write_text("".join(lines), encoding="utf-8")
                problems.append(f"{name}: rewritten from {copy.source}")
            else:
                problems.append(f"{name}: differs from {copy.source} (run python .ci/check_copies.py --fix)\n")
                problems[-1] += "\n".join(diff)
    return problems


def python_files(root: Path = REPO) -> list[Path]:
    """The repository's tracked Python files (every *.py under ``root`` outside hidden and virtual-env folders when
    ``root`` is not a git work tree)."""
    try:
        out = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True)
        return [root / p for p in out.stdout.split() if (root / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in root.rglob("*.py") if not any(part.startswith(".") for part in p.relative_to(root).parts)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fix", action="store_true", help="rewrite drifted copies from their sources")
    args = parser.parse_args(argv)
    problems = check(python_files(), REPO, fix=args.fix)
    for problem in problems:
        print(problem)
    copies = sum(len(find_copies(p)) for p in python_files())
    print(f"{copies} marked copies, {len(problems)} {'rewritten' if args.fix else 'drifted'}")
    return 1 if problems and not args.fix else 0


if __name__ == "__main__":
    sys.exit(main())
