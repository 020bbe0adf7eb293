"""The frame of every world's command module (``python -m worlds.<name> <command> [flags]``).

A world's ``__main__.py`` lists its commands as ``{name: (one-line description, add_flags(parser),
action(args, parser))}``; :func:`command_parser` turns them into argparse subcommands (``--help`` lists them,
``<command> --help`` shows that command's flags) and :func:`run_command` parses a command line and runs the
chosen action with its own parser (for ``parser.error``). An action returns an exit status or ``None`` (0). The
parsers are ``ddpo_grpo.script_args``' (the scripts' convention): ``--debug``, defaults in ``--help``, one-line
errors, hyphenated option spellings deprecated.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping, Sequence

Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[..., int | None]]


def command_parser(prog: str, description: str, commands: Mapping[str, Command]) -> argparse.ArgumentParser:
    """A parser with one subcommand per entry of ``commands`` (flags added in order, defaults shown in help)."""
    from ddpo_grpo.script_args import ScriptParser

    parser = ScriptParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    parser.actions_of = {}
    for name, (help_line, add_flags, action) in commands.items():
        p = sub.add_parser(name, help=help_line, description=help_line)  # (a ScriptParser too: --debug, defaults)
        add_flags(p)
        parser.actions_of[name] = (p, action)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with a :func:`command_parser` parser and run the chosen command: its exit status; a bad
    command line or input (``parser.error``, a ``UserError``) is one line and ``SystemExit(2)``, the traceback with
    --debug (``ddpo_grpo.script_args.run_script``)."""
    from ddpo_grpo.script_args import run_script

    def run(args):
        sub, action = parser.actions_of[args.command]
        return action(args, sub)

    return run_script(parser, run, argv, raise_status=True)


def pretrain_command(module: str, config: str, recipe: str, label: str, help_line: str) -> Command:
    """The ``pretrain`` command of a world whose recipe ``module.recipe`` (a ``ddpo_grpo.pretraining`` recipe with
    config dataclass ``module.config``) runs on the core pretraining loop: one flag per config field, plus the run's
    flags (``ddpo_grpo.pretraining.cli``). The module is imported only when the command is chosen or its flags built."""

    def add_flags(p: argparse.ArgumentParser) -> None:
        from ddpo_grpo.pretraining.cli import add_config_flags, add_run_flags

        add_run_flags(p)
        add_config_flags(p, getattr(importlib.import_module(module), config))

    def action(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
        from ddpo_grpo.pretraining.cli import run_parsed

        run_parsed(getattr(importlib.import_module(module), recipe), vars(args), label=label, skip=("command",))

    return help_line, add_flags, action


__all__ = ["Command", "command_parser", "pretrain_command", "run_command"]
