"""Command lines of pretraining scripts: one flag per field of a recipe's config dataclass, then run or resume.

    parser = config_parser(config_cls, description)   # --out, --resume, --threads, --tiny + one flag per field
    main_for(recipe_cls, argv, parser)                 # parse, build the config, run / resume, print the result
    run_parsed(recipe_cls, vars(args), skip=("command",))  # the same on a subcommand's parsed flags

A field's flag parses as its annotation says: ``tuple[float, ...]`` from ``"1,2,3"``, ``str | None`` with
``none`` / ``""`` for None. Flags not given do not appear in the namespace (``argparse.SUPPRESS``), so a
resumed run sees only the settings asked for now (:func:`~ddpo_grpo.pretraining.config.resumed_config`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import types
import typing

from ddpo_grpo.pretraining.config import PretrainConfig, ResumeError

#: command-line flags of every pretraining script that are not config fields
RUN_FLAGS = ("out", "resume", "threads", "tiny", "debug")  # (--debug: every command's, ddpo_grpo/script_args.py)


def field_parser(tp):
    """The argparse ``type`` of a config field annotated ``tp``."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return lambda s: tuple(inner(x) for x in s.split(",") if x.strip())
    if origin in (typing.Union, types.UnionType):  # str | None
        return lambda s: None if s.lower() in ("none", "") else s
    if tp is bool:
        return lambda s: s.lower() in ("1", "true", "yes", "on")
    return tp


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """--out, --resume, --threads, --tiny."""
    p.add_argument("--out", required=True, help="run directory (checkpoints/, final/, pretrain_log.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue the newest checkpoint in --out")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--tiny", action="store_true", help="toy sizes for smoke tests (the config's tiny())")


def add_config_flags(p: argparse.ArgumentParser, config_cls: type[PretrainConfig]) -> None:
    """One ``--<field>`` flag per field of ``config_cls`` (default shown, absent unless given)."""
    hints = typing.get_type_hints(config_cls)
    defaults = config_cls()
    for f in dataclasses.fields(config_cls):
        default = getattr(defaults, f.name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        p.add_argument(
            f"--{f.name}", type=field_parser(hints[f.name]), default=argparse.SUPPRESS, help=f"(default: {shown})"
        )


def config_parser(config_cls: type[PretrainConfig], description: str) -> argparse.ArgumentParser:
    """A parser with the run flags and one flag per config field."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_run_flags(p)
    add_config_flags(p, config_cls)
    return p


def main_for(recipe_cls, argv, parser: argparse.ArgumentParser, label: str = "", skip: tuple[str, ...] = ()):
    """Parse ``argv``, build the config (``tiny()`` with --tiny), run or resume in --out; return the final dir.

    ``skip``: further flags of ``parser`` that are not config fields (e.g. ``arch``); ``label`` goes into
    the message of a refused resume. A refused resume exits with that message (``SystemExit``).
    """
    return run_parsed(recipe_cls, vars(parser.parse_args(argv)), label, skip)


def run_parsed(recipe_cls, args: dict, label: str = "", skip: tuple[str, ...] = ()):
    """:func:`main_for` on flags already parsed (``args``: the namespace as a dict, e.g. of a world command's
    ``pretrain`` subcommand, whose own keys go in ``skip``)."""
    import torch

    from ddpo_grpo.pretraining.loop import run

    torch.set_num_threads(max(1, args["threads"]))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    given = {k: v for k, v in args.items() if k not in RUN_FLAGS and k not in skip}
    cfg_cls = recipe_cls.config_class
    try:
        cfg = cfg_cls.tiny(**given) if args["tiny"] else cfg_cls(**given)
        final = run(
            recipe_cls, cfg, args["out"], resume=args["resume"], log=lambda s: print(s, flush=True), overrides=given
        )
    except ResumeError as exc:
        sys.exit(f"--resume {args['out']}{f' ({label})' if label else ''}: {exc}")
    print(f"done: {final}", flush=True)
    return final
