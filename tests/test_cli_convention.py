"""One command-line convention for every script in scripts/ (issue 33; ddpo_grpo/script_args.py): a parser from
``script_parser``; --help lists each option with its default; --debug everywhere (the traceback instead of the
one-line message); an unknown option is one line naming the valid ones, exit status 2; the hyphenated spelling of an
option works for one release with one deprecation line. The scripts are enumerated from scripts/*.py, so a new
script must follow the convention (and name a quick bad input below) to pass."""

import re
from pathlib import Path

import pytest

from ddpo_grpo.script_args import ScriptParser
from foundation.errors import UserError
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (REPO / "scripts").glob("*.py"))
#: the scripts whose ``main`` takes the whole command line, program first (the ml-collections ones)
PROGRAM_FIRST = {"train", "plan"}
#: per script: the least command line that parses, and one that is refused (before anything heavy is loaded) with
#: the words of its message; "{tmp}" is the test's directory
CASES = {
    "benchmark": ([], ["--models", "nope"], ["--models 'nope'"]),
    "benchmark_learning": ([], ["--out", "{tmp}/b", "--variants", "nope"], ["--variants", "nope"]),
    "diagnose_updates": (
        [],
        ["--checkpoint", "{tmp}/run", "--config.seed=1"],
        ["--checkpoint measures with the run's saved config"],
    ),
    "evaluate": (["--model", "m"], ["--model", "{tmp}/missing", "--out", "{tmp}/o"], ["--model", "no such directory"]),
    "plan": ([], ["--gpus", "0"], ["--gpus 0"]),
    "sample": (
        ["--model", "m", "--prompts", "p", "--out", "o"],
        ["--model", "{tmp}/missing", "--prompts", "simple", "--out", "{tmp}/o"],
        ["--model", "no such directory"],
    ),
    "serve_reward": (["--reward", "r"], ["--reward", "jpeg_compressibility", "--kwargs", "[1]"], ["--kwargs"]),
    "train": ([], ["--config.train.lr=1"], ["train has no field 'lr'"]),
}
_modules = {}


def _script(name):
    if name not in _modules:
        _modules[name] = load_script(name)
    return _modules[name]


def _main(name, argv, tmp_path=None) -> int:
    """Run the script's ``main`` in-process; its exit status (returned, or raised as SystemExit)."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        return _script(name).main([f"scripts/{name}.py", *argv] if name in PROGRAM_FIRST else argv)
    except SystemExit as exc:
        return exc.code


def _help_chunks(text: str) -> dict[str, str]:
    """Option -> its entry in a --help text (lines joined)."""
    chunks = {}
    for block in re.split(r"\n(?=  -)", text.split("\noptions:\n", 1)[1])[1:]:  # (the first: -h, --help)
        block = block.split("\n\n", 1)[0]  # (up to the section's end)
        chunks.setdefault(block.split()[0], " ".join(block.split()))  # (the options come before the epilog)
    return chunks


def _options(parser):
    return [a for a in parser._actions if a.option_strings and a.option_strings[-1] != "--help"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_lists_every_option_with_its_default(name, capsys):
    assert name in CASES, f"scripts/{name}.py: name its least command line and a quick bad input in CASES"
    parser = _script(name).build_parser()
    assert isinstance(parser, ScriptParser), f"scripts/{name}.py: build its parser with script_parser"
    assert _main(name, ["--help"]) == 0
    text = capsys.readouterr().out
    chunks = _help_chunks(text)
    for action in _options(parser):
        flag = action.option_strings[0]  # (the first spelling heads the entry)
        assert flag in chunks, (flag, text)
        shown = chunks[flag]
        if action.required:
            assert "(required)" in shown, shown
        elif action.default is not None and not isinstance(action.default, list):
            assert f"(default: {action.default})" in shown or "default" in shown.lower(), shown
        else:
            assert "default" in shown.lower(), shown
    if name in PROGRAM_FIRST:  # the ml-collections forms
        assert "--config.<field>=<value>" in text and "--config FILE.py[:NAME]" in text


@pytest.mark.parametrize("name", SCRIPTS)
def test_unknown_option_is_one_line_naming_the_valid_ones(name, capsys):
    good = CASES[name][0]
    assert _main(name, [*good, "--no_such_option=1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: unknown option '--no_such_option=1'"), err
    for action in _options(_script(name).build_parser()):
        assert action.option_strings[-1] in err, (action.option_strings, err)


def test_unknown_option_suggests_the_nearest(capsys):
    assert _main("plan", ["--gpu-mem", "8"]) == 2
    assert "did you mean --gpu_memory" in capsys.readouterr().err


def _value(action):
    """A value for ``action`` and what it parses to (None for a flag)."""
    if action.nargs == 0:
        return None, action.const
    if action.choices:
        return str(list(action.choices)[-1]), list(action.choices)[-1]
    kind = action.type or str
    return "3", kind("3")


@pytest.mark.parametrize("name", SCRIPTS)
def test_hyphenated_spelling_works_with_one_deprecation_line(name, capsys, tmp_path):
    parser = _script(name).build_parser()
    two_words = [a for a in _options(parser) if "_" in a.option_strings[-1]]
    if not two_words:
        pytest.skip(f"scripts/{name}.py has no option of two words")
    good, bad, words = CASES[name]
    for action in two_words:
        new = action.option_strings[-1]
        old = new.replace("_", "-")
        value, parsed = _value(action)
        args = parser.parse_args([*good, old, *([] if value is None else [value])])
        assert getattr(args, action.dest) == parsed, (old, args)
        err = capsys.readouterr().err
        assert err.splitlines() == [f"{old} is deprecated, use {new} (the old spelling stops working in 0.3.0)"], err
    # through main: the old spelling's value arrives, then the script's own check speaks
    action = two_words[0]
    value, _ = _value(action)
    old = action.option_strings[-1].replace("_", "-")
    assert _main(name, [*bad, old, *([] if value is None else [value])], tmp_path) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "is deprecated" in lines[0] and all(w in lines[1] for w in words), lines


def test_plans_old_gpu_memory_spelling_reaches_its_check(capsys):
    assert _main("plan", ["--gpu-memory", "-8"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "--gpu-memory is deprecated, use --gpu_memory (the old spelling stops working in 0.3.0)",
        "error: --gpu_memory -8: GiB per GPU must be > 0",
    ]


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_usage_error_is_one_line_and_debug_shows_the_traceback(name, capsys, tmp_path):
    good, bad, words = CASES[name]
    assert _script(name).build_parser().parse_args([*good, "--debug"]).debug is True
    assert _main(name, bad, tmp_path) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert all(w in err for w in words), (words, err)
    with pytest.raises(UserError) as exc:  # --debug: the exception itself, whose traceback Python prints
        _main(name, [*bad, "--debug"], tmp_path)
    assert all(w in str(exc.value) for w in words)
    assert exc.value.__traceback__ is not None


# ---- the worlds' commands (``python -m worlds.<name> <command>``: worlds/commands.py) -----------------------------

WORLDS = sorted(p.parent.name for p in (REPO / "worlds").glob("*/__main__.py"))


def _world(name):
    import importlib

    return importlib.import_module(f"worlds.{name}.__main__")


def _commands(name):
    return _world(name).build_parser().actions_of  # command -> (its parser, its action)


@pytest.mark.parametrize("world", WORLDS)
def test_world_commands_follow_the_convention(world, capsys):
    for command, (sub, _) in _commands(world).items():
        assert isinstance(sub, ScriptParser), (world, command)
        with pytest.raises(SystemExit) as exc:
            _world(world).main([command, "--help"])
        assert exc.value.code == 0
        chunks = _help_chunks(capsys.readouterr().out)
        for action in _options(sub):
            line = chunks[action.option_strings[0]]
            assert "default" in line or "(required)" in line, (world, command, action.option_strings, line)
        with pytest.raises(SystemExit) as exc:
            _world(world).main([command, "--no_such_option=1"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: unknown option '--no_such_option=1'") and "--debug" in err, err
        assert all(a.option_strings[-1] in err for a in _options(sub)), err


@pytest.mark.parametrize("world", WORLDS)
def test_world_commands_take_the_hyphenated_spelling_for_one_release(world, capsys):
    for command, (sub, _) in _commands(world).items():
        two_words = [a for a in _options(sub) if "_" in a.option_strings[-1]]
        needed = [
            x for a in sub._actions if a.required for x in ([a.option_strings[-1], "x"] if a.option_strings else ["x"])
        ]
        for action in two_words[:1]:
            value, parsed = _value(action)
            old = action.option_strings[-1].replace("_", "-")
            args = _world(world).build_parser().parse_args([command, *needed, old, *([] if value is None else [value])])
            assert getattr(args, action.dest) == parsed
            assert capsys.readouterr().err.count("is deprecated, use") == 1


def test_benchmark_summary_of_a_directory_without_runs_is_one_line(tmp_path, capsys):
    """--summarize on an empty or missing directory: one line naming it and exit 2, not max()'s traceback."""
    script = load_script("benchmark_learning")
    for target in (tmp_path, tmp_path / "missing"):
        assert script.main(["--summarize", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--summarize {target}" in err[0], err
