"""The command lines of the documentation, read afresh on every test run, and the ways tests/test_doc_commands.py
checks them.

A command is a line of a fenced code block in README.md or docs/**/*.md: every line of a block tagged ``bash`` /
``sh`` / ``shell`` / ``console``, and of an untagged block whose first line starts with a program (``python``,
``torchrun``, ``pip``, … after ``VAR=value`` assignments; other untagged blocks hold output or diagrams). A line
ending in a backslash continues on the next; ``# comments`` are dropped; ``a && b`` is two commands on one line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: how an untagged block that holds commands starts
PROGRAM = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?(?:python[\d.]*|pip\d?|torchrun|accelerate|srun|ruff|pytest)\b"
)


@dataclass(frozen=True)
class Command:
    """One documented command: where it is, its words (shell-split, comment dropped), and its leading ``VAR=value``
    assignments apart."""

    file: str  # relative to the repository root
    line: int  # where the command (or its && chain) starts
    words: tuple[str, ...]
    env: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def text(self) -> str:
        """The command as the rule table's patterns see it: its words joined by single spaces (quotes removed)."""
        return " ".join(self.words)

    @property
    def argv(self) -> list[str]:
        """The words after the leading assignments."""
        return list(self.words[len(self.env) :])


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _logical_lines(block: list[tuple[int, str]]):
    """(first line number, text) of each logical line: backslash continuations joined."""
    start, parts = None, []
    for number, line in block:
        if start is None:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(p.strip() for p in parts)
        start, parts = None, []
    if parts:
        yield start, " ".join(p.strip() for p in parts)


def _commands_of(rel: str, number: int, text: str) -> list[Command]:
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise ValueError(f"{rel}:{number}: cannot be split as a shell line ({exc}): {text!r}") from None
    out, current = [], []
    for word in [*words, "&&"]:
        if word != "&&":
            current.append(word)
            continue
        if current:
            env = {}
            for w in current[:-1]:  # a lone assignment (head=$(...)) stays a command of its own
                if not ASSIGNMENT.match(w):
                    break
                name, value = w.split("=", 1)
                env[name] = value
            out.append(Command(rel, number, tuple(current), env))
        current = []
    return out


def extract(path: Path, root: Path = REPO) -> list[Command]:
    """Every command of the fenced blocks of ``path`` (see the module's docstring)."""
    rel = path.relative_to(root).as_posix()
    commands, block, lang, inside = [], [], "", False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence and not inside:
            inside, lang, block = True, fence.group(2).lower(), []
            continue
        if fence and inside and not fence.group(2):
            inside = False
            lines = [(n, t) for n, t in block if t.strip()]
            holds_commands = lang in SHELL_LANGS or (lang == "" and lines and PROGRAM.match(lines[0][1].strip()))
            if holds_commands:
                for start, text in _logical_lines(lines):
                    commands.extend(_commands_of(rel, start, text))
            continue
        if inside:
            block.append((number, line))
    return commands


def documented_commands(root: Path = REPO) -> list[Command]:
    return [c for path in doc_files(root) for c in extract(path, root)]


# ---- placeholders ------------------------------------------------------------------------------------------------

#: (pattern in a word, its stand-in): the seeds the notes loop over, shell variables of the SLURM script
SEEDS_AND_VARIABLES = (
    (re.compile(r"^S$"), "0"),
    (re.compile(r"=S$"), "=0"),
    (re.compile(r"_sS\b"), "_s0"),
    (re.compile(r"\$SLURM_JOB_ID"), "4242"),
    (re.compile(r"\$head"), "node0"),
)


def substitute(words, stand_ins: dict[str, str] | None = None, tmp: Path | None = None) -> list[str]:
    """``words`` with the documented placeholders replaced: seeds S → 0, the SLURM variables, paths under /tmp/
    moved under ``tmp``, and the names in ``stand_ins`` (``DIR``, ``MODEL``, ``my_reward.py`` → a real path; a name
    counts where no letter, digit, ``_``, ``.``, ``/`` or ``-`` touches it; ``<tmp>`` in a value is ``tmp``)."""
    out = []
    for word in words:
        for pattern, value in SEEDS_AND_VARIABLES:
            word = pattern.sub(value, word)
        if tmp is not None:
            word = word.replace("/tmp/", f"{tmp}/")
        for name, value in (stand_ins or {}).items():
            value = value.replace("<tmp>", str(tmp)) if tmp is not None else value
            word = re.sub(rf"(?<![\w./-]){re.escape(name)}(?![\w-])", lambda _, v=value: v, word)
        out.append(word)
    return out


# ---- launchers ---------------------------------------------------------------------------------------------------


def launched(argv: list[str]) -> tuple[str, int, list[str]]:
    """(launcher, processes, the launched script's argv) of a launcher line: ``torchrun`` / ``python -m
    torch.distributed.run`` (processes = --nnodes × --nproc_per_node), ``accelerate launch`` (--num_processes, or
    its --config_file's), ``srun torchrun …``. The launcher's own arguments go through its real parser: an unknown
    or malformed one fails here."""
    if argv[0] == "srun":
        argv = argv[1:]  # srun's own options would come first; the documented line has none
    if argv[0] == "torchrun" or argv[:3] in (
        ["python", "-m", "torch.distributed.run"],
        ["python3", "-m", "torch.distributed.run"],
    ):
        from torch.distributed.run import get_args_parser, parse_min_max_nnodes

        rest = argv[1:] if argv[0] == "torchrun" else argv[3:]
        args = get_args_parser().parse_args(rest)
        nnodes = parse_min_max_nnodes(args.nnodes)[1]
        return "torchrun", nnodes * int(args.nproc_per_node), [args.training_script, *args.training_script_args]
    if argv[:2] == ["accelerate", "launch"]:
        from accelerate.commands.launch import launch_command_parser

        args = launch_command_parser().parse_args(argv[2:])
        processes = args.num_processes
        if args.config_file:
            from accelerate.commands.config.config_args import load_config_from_file

            loaded = load_config_from_file(str(REPO / args.config_file))
            processes = processes or loaded.num_processes
        return "accelerate", int(processes or 1), [args.training_script, *args.training_script_args]
    raise ValueError(f"not a launcher line: {' '.join(argv)}")


# ---- running a script's own parser -------------------------------------------------------------------------------


class Parsed(BaseException):
    """Raised by :func:`parse_only` right after the script's parser accepted its arguments (a BaseException, so no
    ``except Exception`` in the script swallows it)."""

    def __init__(self, namespace):
        super().__init__("parsed")
        self.namespace = namespace


def parse_only(main, argv: list[str]):
    """The argparse namespace ``main(argv)`` parses, without running the command: the script's real parser (unknown
    flags and bad values fail with argparse's SystemExit(2) and message, captured). Returns (namespace or None,
    the parser's output)."""
    from ddpo_grpo.script_args import ScriptParser

    classes = (argparse.ArgumentParser, ScriptParser)  # the scripts' parser overrides argparse's parse_args
    originals = {cls: cls.__dict__["parse_args"] for cls in classes}
    outer = []

    def wrapped(cls):
        def parse_args(self, args=None, namespace=None):
            namespace = originals[cls](self, args, namespace)
            if not outer:  # the first (outermost) parse is the command's
                outer.append(namespace)
                raise Parsed(namespace)
            return namespace

        return parse_args

    def serve_forever(self, *args, **kwargs):  # a script that parses its flags some other way must not serve here
        raise Parsed(None)

    import socketserver

    err = io.StringIO()
    serving = socketserver.BaseServer.serve_forever
    from ddpo_grpo import script_args

    running = script_args.run_script

    def run_script(parser, fn, argv=None, **kwargs):  # a guard: whatever parsed, the command itself never runs here
        def stop(args):
            raise Parsed(args)

        return running(parser, stop, argv, **kwargs)

    for cls in classes:
        cls.parse_args = wrapped(cls)
    socketserver.BaseServer.serve_forever = serve_forever
    script_args.run_script = run_script
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            main(argv)
    except Parsed as done:
        if done.namespace is None:
            return None, err.getvalue() + "\n(the command started serving without argparse's parse_args)"
        return done.namespace, err.getvalue()
    except SystemExit:
        return None, err.getvalue()
    finally:
        for cls, original in originals.items():
            cls.parse_args = original
        socketserver.BaseServer.serve_forever = serving
        script_args.run_script = running
    return None, err.getvalue() + "\n(the command ran without argparse's parse_args)"


@contextlib.contextmanager
def world_size(n: int):
    """WORLD_SIZE=n while a recipe is loaded, as a launcher of n processes sets it (config/recipes.py reads it)."""
    previous = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(n)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("WORLD_SIZE")
        else:
            os.environ["WORLD_SIZE"] = previous


def load_module(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
