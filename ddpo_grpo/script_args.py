"""The one command-line convention of ``scripts/``: absl / ml-collections style long options.

* options are ``--name_with_underscores``; ``--name=value`` and ``--name value`` both work; a boolean is a flag
  (``--debug``, ``--print_config``); the ml-collections scripts (train.py, plan.py) also take ``--config FILE[:NAME]``
  and ``--config.a.b=value`` (:func:`ddpo_grpo.cli.load_config`);
* ``--help`` lists every option with its default (or "required");
* ``--debug`` everywhere: a failure's traceback instead of its one-line message (:func:`ddpo_grpo.cli.run_main`);
* the hyphenated spelling of an option (``--gpu-memory``; argparse's habit, plan.py's old one) still works for one
  release (:data:`DEPRECATED_UNTIL`), with one line on stderr: ``--gpu-memory is deprecated, use --gpu_memory``;
* an unknown option, a missing or malformed value: one line naming it (the nearest options, then every option) and
  exit status 2, never argparse's usage block.

Every script builds its parser with :func:`script_parser` (``build_parser()``) and runs through :func:`run_script`.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import sys

from ddpo_grpo.cli import UsageError, run_main

#: the hyphenated spellings already reported for the command line being parsed (one line each)
_said: set[str] = set()
#: the release after which the hyphenated spellings are refused (then: an unknown option, with the close match)
DEPRECATED_UNTIL = "0.3.0"


class UnknownOption(UsageError):
    """An argument no option of the command takes."""


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; each option's help ends with its default ("(default: X)", or
    "(required)"), unless the help already says what its default is."""

    def _format_action(self, action):
        if action.option_strings and not action.help:  # (argparse would skip it; its default is still shown)
            action = copy.copy(action)
            action.help = "(required)" if action.required else "(default: %(default)s)"
        return super()._format_action(action)

    def _expand_help(self, action):
        text = super()._expand_help(action)
        if not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return f"{text} (required)"
        if "default" in text.lower():  # (said in words: "default: the run's, else ...")
            return text
        default = action.default
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default: {shown})"


class ScriptParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` of the convention: a failure while parsing is a :class:`UsageError` (one line, exit
    status 2 through :func:`run_script`); hyphenated spellings are rewritten with a deprecation line; ``passthrough``
    (a predicate on an unknown argument) keeps arguments another parser reads (``--config.a.b=v``)."""

    def __init__(self, *args, passthrough=None, config_forms: str = "", **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)
        self.passthrough = passthrough
        self.config_forms = config_forms  # the --config.<field> forms, named in the unknown-option line
        self.add_argument(
            "--debug", action="store_true", help="show the traceback of a failure instead of its one-line message"
        )

    def options(self) -> list[str]:
        """Every long option string, in the order of --help."""
        return [s for a in self._actions for s in a.option_strings if s.startswith("--")]

    def error(self, message):
        raise UsageError(message)

    def undeprecated(self, argv: list[str]) -> list[str]:
        """``argv`` with each hyphenated spelling of an option replaced by its name, one stderr line per spelling."""
        known, out, said = set(self.options()), [], _said
        for arg in argv:
            if arg == "--":
                out.extend(argv[len(out) :])
                break
            name, eq, value = arg.partition("=")
            new = "--" + name[2:].replace("-", "_")
            if arg.startswith("--") and "-" in name[2:] and name not in known and new in known:
                if name not in said:
                    print(
                        f"{name} is deprecated, use {new} (the old spelling stops working in {DEPRECATED_UNTIL})",
                        file=sys.stderr,
                        flush=True,
                    )
                    said.add(name)
                arg = new + eq + value
            out.append(arg)
        return out

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, with the hyphenated spellings rewritten first (also how argparse parses a subcommand), and an
        unknown option named before a missing one (it may be the misspelt one)."""
        argv = self.undeprecated(list(sys.argv[1:] if args is None else args))
        try:
            return super().parse_known_args(argv, namespace)
        except UsageError:
            required = [a for a in self._actions if a.required]
            for action in required:
                action.required = False
            try:
                self._refuse_unknown(super().parse_known_args(argv, namespace)[1])
            except UnknownOption:
                raise
            except UsageError:
                pass
            finally:
                for action in required:
                    action.required = True
            raise

    def parse_with_rest(self, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
        """The namespace of ``argv`` and the arguments ``passthrough`` accepted; any other argument is a UsageError
        naming it, the nearest options and every option (a subcommand's: its own)."""
        _said.clear()  # (one deprecation line per spelling and command line)
        args, rest = self.parse_known_args(argv)
        chosen = self
        for action in self._actions:  # unknown arguments after a subcommand are that subcommand's to name
            if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
                chosen = action.choices[getattr(args, action.dest)]
        return args, (chosen if isinstance(chosen, ScriptParser) else self)._refuse_unknown(rest)

    def _refuse_unknown(self, rest: list[str]) -> list[str]:
        """The arguments of ``rest`` that ``passthrough`` keeps; any other is a UsageError (:meth:`unknown`)."""
        kept = []
        for arg in rest:
            if self.passthrough is not None and self.passthrough(arg, kept):
                kept.append(arg)
                continue
            self.unknown(arg)
        return kept

    def parse_args(self, args=None, namespace=None):
        """The namespace of ``args``; with ``passthrough``, the arguments it kept are its ``overrides``."""
        parsed, kept = self.parse_with_rest(sys.argv[1:] if args is None else args)
        if self.passthrough is not None:
            parsed.overrides = kept
        return parsed

    def unknown(self, arg: str):
        """Raise the one-line UsageError of an argument no option takes."""
        options = self.options()
        if not arg.startswith("-"):
            raise UnknownOption(
                f"unexpected argument {arg!r} (options take their values as --name=value or --name value)"
            )
        spelt = "--" + arg.split("=", 1)[0].lstrip("-").replace("-", "_")
        near = difflib.get_close_matches(spelt, options, n=2, cutoff=0.7)
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        forms = f", {self.config_forms}" if self.config_forms else ""
        raise UnknownOption(f"unknown option {arg!r}{hint}; options: {', '.join(options)}{forms} (--help for each)")


def script_parser(script: str, description: str, *, epilog: str | None = None, **kwargs) -> ScriptParser:
    """The parser of ``script`` (its ``__file__``): --debug added, --help with every option's default, hyphenated
    spellings deprecated, errors in one line (:class:`ScriptParser`)."""
    prog = f"python scripts/{os.path.basename(script)}"
    return ScriptParser(prog=prog, description=description, epilog=epilog, **kwargs)


def config_script_parser(script: str, doc: str, *, usage: str, config_help: str, fields_help: str) -> ScriptParser:
    """The parser of an ml-collections script (train.py, plan.py): :func:`script_parser` with the module docstring
    ``doc`` as description (its first paragraph) and epilog (the rest), ``--config FILE.py[:NAME]`` (``config_help``)
    and the ``--config.<field>=<value>`` overrides passed through (:func:`config_override`; their forms described by
    ``fields_help``, read back by :func:`config_argv`)."""
    summary, details = doc.split("\n\n", 1)
    p = script_parser(
        script,
        summary,
        epilog=details,
        usage=usage,
        passthrough=config_override,
        config_forms="--config.<field>=<value>",
    )
    p.add_argument("--config", metavar="FILE.py[:NAME]", default=None, help=config_help)
    p.add_argument_group("config fields (ml-collections)", fields_help)
    return p


def config_argv(prog: str, args) -> list[str]:
    """The command line ``ddpo_grpo.cli.load_config`` reads from a :func:`config_script_parser`'s namespace: --config
    (when given) and the --config.<field> ones."""
    return [prog, *([f"--config={args.config}"] if args.config else []), *args.overrides]


def config_override(arg: str, kept: list[str]) -> bool:
    """The ``passthrough`` of the ml-collections scripts: ``--config.a.b=value`` (or ``--config.a.b value``)."""
    if arg.startswith("--config."):
        return True
    return bool(kept) and kept[-1].startswith("--config.") and "=" not in kept[-1] and not arg.startswith("--")


def run_script(parser: ScriptParser, fn, argv=None, *, raise_status: bool = False) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) with ``parser`` and run ``fn(args)`` under
    :func:`ddpo_grpo.cli.run_main`: 0 on success (``--help`` too) or the status ``fn`` returns (an int; any other
    value is the caller's result, not a status); 2 and one line for a
    bad command line or input, the traceback with --debug. ``raise_status``: a non-zero status raises
    ``SystemExit(status)`` instead, and --help ``SystemExit(0)`` (the in-process contract of the commands that were
    argparse's, which exit as argparse does)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in (argv[: argv.index("--")] if "--" in argv else argv)
    returned = []

    def body():
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help
            if exc.code in (0, None) and not raise_status:
                return
            raise
        returned.append(fn(args))

    status = run_main(body, debug=debug)
    said = returned[0] if returned else None  # (a command that says its own status, e.g. a check that failed)
    if not status and isinstance(said, int) and not isinstance(said, bool):
        status = said
    if status and raise_status:
        raise SystemExit(status)
    return status
