"""Every command in README.md and docs/ runs as written (issue 33): the fenced commands are read from the docs on
every run (tests/doc_commands.py) and each must match exactly one rule of RULES, which says how it is checked and
why; a new documented command that no rule covers fails, and so does a rule that covers none (no stale rules).

The ways (fast ones in the default suite, real runs at tiny size in the slow part, ``-m slow``):

* ``train``      — the exact arguments through ``scripts/train.py --print_config`` in this process: the config loads
                   and passes config_checks.validate at the process count the launch implies (WORLD_SIZE);
* ``train+tiny`` — the same, and (slow) the command run for real, in this process, with TINY appended;
* ``launch``     — the launcher's own arguments through its real parser (torchrun's, accelerate's, whose config
                   file must load), then the train.py part as ``train`` at the launch's process count;
* ``launch+tiny``— the same, and (slow) the launch run for real under torchrun with TINY appended;
* ``plan``       — ``scripts/plan.py`` run as written, in this process;
* ``parse``      — the script's real argument parser accepts the line (an unknown flag or bad value fails);
* ``parse+tiny`` — the same, and (slow) the command run for real at tiny size (its stand-ins in the rule);
* ``pytest``     — ``--collect-only``: the files exist and the -k / -m selection picks at least one test;
* ``pip``        — the extras the install names exist in pyproject.toml (the install itself is CI's fresh venv);
* ``run``        — run as written (a subprocess);
* ``record``     — not run: a line of a lab note recording the environment it used (named in the reason).

Placeholders get documented stand-ins (tests/doc_commands.substitute): seeds ``S`` → 0, ``DIR`` / ``MODEL`` → the
shipped model the rule names, paths under /tmp/ → the test's own directory, the SLURM variables → fixed values.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib

from tests.doc_commands import REPO, documented_commands, launched, load_module, parse_only, substitute, world_size

SHIPPED_CONFIGS = r"config/(?:quickstart|shapes|restore|edit|motion)\.py:\w+|config/llm\.py:quick\w*"
ARITHMETIC = "worlds/arithmetic/models/base"


@dataclass(frozen=True)
class Rule:
    pattern: str  # re.fullmatch against Command.text (words joined by spaces, quotes removed)
    way: str
    reason: str
    stand_ins: dict = field(default_factory=dict, hash=False)
    optional: str = ""  # pytest lines: a module whose absence skips the selected files (then collected as skipped)

    def matches(self, command) -> bool:
        return re.fullmatch(self.pattern, command.text) is not None


RULES = (
    # ---- installing, linting, the suite
    Rule(r"pip install -e \.(\[[\w,]+\])?", "pip", "installing is CI's fresh venv (.ci/run); here: the extras exist"),
    Rule(r"ruff (check|format --check) \.", "run", "the lint and format check CI runs, run as written"),
    Rule(r"python -m pytest -q tests", "pytest", "the whole suite: collected in the slow part (CI runs it itself)"),
    Rule(
        r"python -m pytest( -\w+)* tests/\S+\.py.*", "pytest", "collected: the files exist, the selection is not empty"
    ),
    Rule(
        r"/work/trlvenv/bin/python -m pytest( -\w+)* tests/\S+\.py.*",
        "pytest",
        "the TRL venv's tests, collected with this interpreter (without trl each file skips as a whole, for that "
        "reason: then that is checked)",
        optional="trl",
    ),
    # ---- training on the shipped models: dry run here, a real tiny run in the slow part
    Rule(
        r"python scripts/train\.py( --config\.\S+)*",
        "train+tiny",
        "the quickstart on the shipped ShapesWorld SD model (with its documented overrides)",
    ),
    Rule(
        rf"(OMP_NUM_THREADS=\d )?python scripts/train\.py --config (?:{SHIPPED_CONFIGS})( --config\.\S+)*",
        "train+tiny",
        "a recipe on a shipped model (ShapesWorld, InstructPix2Pix, MotionWorld MDM, ArithmeticWorld Qwen2)",
    ),
    Rule(
        r"python scripts/train\.py --config\.reward\.sources=\{'red': 'my_reward\.py:redness'\} .*",
        "train+tiny",
        "the quickstart with the user reward file docs/rewards.md shows: my_reward.py written from its python block",
        {"my_reward.py": "<tmp>/my_reward.py"},
    ),
    Rule(
        r"python scripts/train\.py --config config/llm\.py:grpo --config\.pretrained\.model=DIR .*",
        "train+tiny",
        "verl's recipe on a user's model, rows and reward: DIR = the shipped ArithmeticWorld Qwen2, data.jsonl = its "
        "train split, my_reward.py = a verl compute_score file written by the test",
        {
            "DIR": ARITHMETIC,
            "data.jsonl": "worlds/arithmetic/data/arithmetic_train.jsonl",
            "my_reward.py": "<tmp>/my_reward.py",
        },
    ),
    Rule(
        r"python scripts/train\.py --config\.reward\.fns=\{'pickscore': 1\.0, 'aesthetic': 0\.1\} .*",
        "train",
        "needs the PickScore and aesthetic weights: dry run only; the rewards themselves run on tiny CLIPs in "
        "tests/test_model_rewards.py",
    ),
    # ---- launchers
    Rule(
        r"(accelerate launch|torchrun|srun torchrun) .*scripts/train\.py --config config/sd3\.py:pickscore.*",
        "launch",
        "needs SD3.5-Medium and PickScore weights and 8-16 GPUs: launcher parsed, dry run at its process count; "
        "the same launch at tiny size on CPU processes is tests/test_scale.py's",
    ),
    Rule(
        r"torchrun --standalone --nproc_per_node 2 scripts/train\.py( --config\.distributed\.strategy=fsdp)?",
        "launch+tiny",
        "the quickstart on 2 CPU processes (DDP, FSDP2)",
    ),
    # ---- planner, evaluation, sampling, serving
    Rule(r"python scripts/plan\.py .*", "plan", "configs only (meta device), so it runs as written"),
    Rule(
        r"(OMP_NUM_THREADS=1 )?python scripts/evaluate\.py --model /tmp/\S+ .*",
        "parse+tiny",
        "evaluates the run the note's train.py line makes: the slow part makes it at tiny size first, then "
        "evaluates 2 prompts (--limit 2 --per_group 0 appended)",
    ),
    Rule(
        r"python scripts/evaluate\.py --model worlds/\S+ .*",
        "parse+tiny",
        "a shipped model, evaluated as written on 2 prompts (--limit 2 --per_group 0 appended)",
    ),
    Rule(
        r"python scripts/evaluate\.py --model MODEL --prompts arithmetic_test .*",
        "parse+tiny",
        "MODEL = the shipped ArithmeticWorld Qwen2 (the note's trained runs are not kept); 2 prompts (--limit 2 "
        "--per_group 0 appended)",
        {"MODEL": ARITHMETIC},
    ),
    Rule(
        r"python scripts/serve_reward\.py --reward pickscore --port \d+",
        "parse",
        "needs the PickScore weights; the server itself is run in the slow part on psnr (the next rule)",
    ),
    Rule(
        r"DDPO_REWARD_TOKEN=\S+ python scripts/serve_reward\.py --reward psnr .*",
        "parse+tiny",
        "served for real until it answers GET /health with its token: --data_root = a directory the test makes, "
        "--port 0 (a free port)",
        {"/data/ground_truths": "<tmp>/ground_truths", "8765": "0"},
    ),
    Rule(
        r"(OMP_NUM_THREADS=1 )?python scripts/benchmark_learning\.py --variants .*",
        "parse",
        "16 epochs × variants × seeds (an hour on CPU): parsed only; one such run is the quickstart's slow run",
    ),
    Rule(
        r"python scripts/benchmark_learning\.py --curve( /tmp/\S+)+( --plot docs/images/\S+\.png)?",
        "parse",
        "the quickstart's three seed runs (not kept): parsed; --curve and --plot run on runs the test writes in "
        "tests/test_learning_curves.py",
    ),
    Rule(
        r"python scripts/benchmark_learning\.py --summarize /tmp/\S+",
        "run",
        "run as written on a directory holding one finished run's metrics.jsonl and report/before.json, written by "
        "the test with the keys the summary reads (/tmp/ → the test's directory)",
    ),
    Rule(
        r"(OMP_NUM_THREADS=1 )?python scripts/diagnose_updates\.py .*",
        "parse",
        "draws several epochs of a real recipe (minutes to an hour): parsed only; the script runs end to end at tiny "
        "size, at a checkpoint, in tests/test_update_diagnostics.py",
    ),
    Rule(
        r"python -m worlds\.\w+ [\w-]+( .*)?", "parse", "the world's command and its flags (pretraining takes an hour)"
    ),
    Rule(
        r"python3 -m torch\.distributed\.run --standalone --nproc_per_node [12] experiments/gpu_check\.py --out \S+",
        "parse",
        "needs one or two GPUs: launcher and flags parsed; the --tiny line below is its CPU stand-in "
        "(tests/test_gpu_check.py)",
    ),
    Rule(
        r"ACCELERATE_USE_CPU=1 .*torchrun --standalone --nproc_per_node 1 experiments/gpu_check\.py --tiny .*",
        "parse",
        "launcher and flags parsed; the run itself at tiny size on CPU is tests/test_gpu_check.py's",
    ),
    Rule(
        r"/work/trlvenv/bin/python experiments/trl_side_by_side\.py .*",
        "parse",
        "needs trl (the TRL venv): flags parsed; the equivalence it measures is tests/test_trl_side_by_side.py's",
    ),
    # ---- records of an environment, not run
    Rule(
        r"\S+/python3\.11 -m venv .*|echo \S+ > \S+\.pth|/work/trlvenv/bin/pip install .*|export PYTHONPATH=.*",
        "record",
        "the TRL venv's set-up in docs/experiments/2026-11-27-trl-equivalence.md (a second venv, network)",
    ),
    Rule(r"cp -r /tmp/bench1/\S+ /tmp/bench2/", "record", "moves a benchmark's run between result folders"),
    Rule(r"head=\$\(scontrol .*", "record", "the SLURM script's node lookup (needs SLURM)"),
)

COMMANDS = documented_commands()


def matched(command) -> list[Rule]:
    return [r for r in RULES if r.matches(command)]


def _rule(command) -> Rule:
    return matched(command)[0]


def by_way(*ways) -> list:
    """pytest params of the commands whose one rule has one of ``ways``, named by file and line."""
    return [
        pytest.param(c, id=f"{c.where}:{c.argv[0] if c.argv else ''}")
        for c in COMMANDS
        if len(matched(c)) == 1 and matched(c)[0].way in ways
    ]


def _where(command) -> str:
    return f"{command.where}: `{command.text}`"


# ---- the table covers the docs, and only them --------------------------------------------------------------------


def test_the_docs_hold_commands():
    assert len(COMMANDS) >= 40, [c.where for c in COMMANDS]


def test_every_documented_command_matches_exactly_one_rule():
    problems = []
    for c in COMMANDS:
        found = matched(c)
        if len(found) != 1:
            which = ", ".join(f"RULES[{RULES.index(r)}]" for r in found) or "no rule"
            problems.append(f"{_where(c)} matches {which}: add or narrow one in tests/test_doc_commands.py")
    assert not problems, "\n".join(problems)


def test_every_rule_matches_a_documented_command():
    stale = [f"RULES[{i}] {r.pattern!r}" for i, r in enumerate(RULES) if not any(r.matches(c) for c in COMMANDS)]
    assert not stale, f"rules that match no documented command (remove them): {stale}"


# ---- train.py: the dry run validates exactly what a start would --------------------------------------------------

train_script = load_module(REPO / "scripts" / "train.py", "train_script_of_docs")


def _dry_run(args: list[str], processes: int) -> tuple[int, str]:
    out = io.StringIO()
    with world_size(processes), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = train_script.main(["scripts/train.py", *args, "--print_config"])
    return rc, out.getvalue()


def _train_args(command, tmp: Path | None = None) -> tuple[int, list[str]]:
    """(processes, train.py's arguments) of a train.py or launcher line, placeholders replaced."""
    argv = substitute(command.argv, _rule(command).stand_ins, tmp)
    if argv[0] in ("python", "python3"):
        assert argv[1] == "scripts/train.py", _where(command)
        return 1, argv[2:]
    _, processes, script = launched(argv)
    assert script[0] == "scripts/train.py", _where(command)
    return processes, script[1:]


@pytest.mark.parametrize("command", by_way("train", "train+tiny", "launch", "launch+tiny"))
def test_train_commands_pass_the_config_checks(command):
    processes, args = _train_args(command)
    rc, out = _dry_run(args, processes)
    assert rc == 0, f"{_where(command)} (as {processes} processes) is refused:\n{out[-2000:]}"


def test_print_config_refuses_what_a_start_would():
    """A batch that does not divide into groups passes the field parser but not the config checks: the dry run says
    so in one line (exit 2), as a start would, and a launch of 3 processes is checked as 3."""
    rc, out = _dry_run(["--config.sample.group_size=3"], 1)
    assert rc == 2 and "group_size" in out and "Traceback" not in out, out[-2000:]
    rc, out = _dry_run(["--config", "config/shapes.py:sd_nft"], 3)
    assert rc == 2 and "WORLD_SIZE=3" in out, out[-2000:]


# ---- the other scripts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", by_way("plan"))
def test_plan_commands_run_as_written(command):
    plan = load_module(REPO / "scripts" / "plan.py", "plan_script_of_docs")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = plan.main(["scripts/plan.py", *command.argv[2:]])
    assert rc == 0, f"{_where(command)} exits {rc}:\n{out.getvalue()[-2000:]}"
    assert "memory plan (fsdp" in out.getvalue(), out.getvalue()[-2000:]


def _main_of(argv: list[str]):
    """(main, its argv) of a python line: a script's or a world's ``python -m worlds.<name>``; launcher lines give
    their script's (the launcher's arguments parsed on the way)."""
    if argv[0].endswith(("python", "python3")) and argv[1] == "-m" and argv[2].startswith("worlds."):
        import importlib

        return importlib.import_module(f"{argv[2]}.__main__").main, argv[3:]
    if argv[0].endswith(("python", "python3")) and argv[1].endswith(".py"):
        script = Path(argv[1])
        return load_module(REPO / script, f"{script.stem}_of_docs").main, argv[2:]
    _, _, script = launched(argv)
    return _main_of(["python", *script])


@pytest.mark.parametrize("command", by_way("parse", "parse+tiny"))
def test_script_flags_parse(command):
    main, args = _main_of(substitute(command.argv, _rule(command).stand_ins))
    namespace, out = parse_only(main, args)
    assert namespace is not None, f"{_where(command)} is refused by its parser:\n{out[-2000:]}"


def _collect(args: list[str]) -> tuple[int, str]:
    """(tests selected, output) of ``pytest --collect-only <args>`` in this process."""

    class Count:
        selected, skipped = 0, []

        def pytest_collection_finish(self, session):
            Count.selected = len(session.items)

        def pytest_collectreport(self, report):
            if report.skipped:
                Count.skipped.append(str(report.longrepr))

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pytest.main(
            ["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO), *args], plugins=[Count()]
        )
    return Count.selected, Count.skipped, out.getvalue()


def _pytest_args(command) -> list[str]:
    argv = command.argv
    return argv[argv.index("pytest") + 1 :]


@pytest.mark.parametrize("command", [p for p in by_way("pytest") if "tests/" in p.values[0].text])
def test_pytest_lines_select_tests(command):
    files = [a for a in _pytest_args(command) if a.startswith("tests/")]
    missing = [f for f in files if not (REPO / f.split("::")[0]).exists()]
    assert not missing, f"{_where(command)}: no such test file {missing}"
    selected, skipped, out = _collect([str(REPO / a) if a.startswith("tests/") else a for a in _pytest_args(command)])
    optional = _rule(command).optional
    if optional and not selected and importlib.util.find_spec(optional) is None:
        assert len(skipped) == len(files) and all(repr(optional) in s for s in skipped), (
            f"{_where(command)}: without {optional} each file should skip for it: {skipped}\n{out[-2000:]}"
        )
        return
    assert selected >= 1, f"{_where(command)} selects no test:\n{out[-2000:]}"


@pytest.mark.parametrize("command", by_way("pip"))
def test_pip_extras_exist(command):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    target = command.argv[-1]
    extras = re.fullmatch(r"\.(?:\[([\w,]+)\])?", target)
    assert extras, f"{_where(command)}: installs {target!r}, not this repository"
    missing = [x for x in (extras.group(1) or "").split(",") if x and x not in project.get("optional-dependencies", {})]
    assert not missing, f"{_where(command)}: pyproject.toml has no extra {missing}"


@pytest.mark.parametrize("command", by_way("run"))
def test_run_as_written(command, tmp_path):
    argv = substitute(command.argv, _rule(command).stand_ins, tmp_path)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    else:
        argv[0] = str(Path(sys.executable).parent / argv[0])
    for word in argv:
        if word.startswith(f"{tmp_path}/"):
            _runs_dir(Path(word))
    env = {**os.environ, **command.env, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{_where(command)} exits {done.returncode}:\n{(done.stdout + done.stderr)[-2000:]}"


def _runs_dir(path: Path) -> None:
    """benchmark_learning.py --summarize's input: one finished run of two epochs (grpo, seed 0), with the keys its
    summary reads (metrics.jsonl's probe/diff, reward/mean and held-out eval/task_mean/*, report/before.json)."""
    run = path / "grpo_s0"
    (run / "report").mkdir(parents=True, exist_ok=True)
    rows = [{"epoch": e, "probe/diff": 0.01 * e, "reward/mean": 0.5 + 0.01 * e, "perf/epoch_s": 60.0} for e in range(2)]
    rows[-1] |= {"eval/task_mean/strict": 0.55, "eval/task_mean/partial": 0.8}
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = {"metrics": {"eval/task_mean/strict": 0.5, "eval/task_mean/partial": 0.75}}
    (run / "report" / "before.json").write_text(json.dumps(before))


# ---- the slow part: the commands on shipped models, run for real at tiny size -----------------------------------

#: appended to every real run: one epoch of one group of 2, one update, no held-out evaluation or probe
TINY = (
    "--config.num_epochs=1",
    "--config.sample.batch_size=2",
    "--config.sample.group_size=2",
    "--config.sample.num_batches_per_epoch=1",
    "--config.train.batch_size=2",
    "--config.train.gradient_accumulation_steps=1",
    "--config.train.num_inner_epochs=1",
    "--config.eval.freq=0",
    "--config.probe.freq=0",
    "--config.logging.progress=False",
)
#: language models: 64 prompt and 8 response tokens (the shipped tiny Qwen2's context is 256)
TINY_LM = (*TINY, "--config.sample.max_prompt_length=64", "--config.sample.max_response_length=8")

COMPUTE_SCORE = """

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(str(ground_truth) in solution_str)
"""


def doc_block(file: str, first_line: str) -> str:
    """The text of the fenced block of ``file`` whose first line is ``first_line`` (the docs' own example code)."""
    lines = (REPO / file).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == first_line and lines[i - 1].startswith("```"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start:end]) + "\n"


@pytest.fixture(scope="module")
def doc_tmp(tmp_path_factory):
    """The slow part's directory (/tmp/ in the docs): the user files the docs show, written once."""
    tmp = tmp_path_factory.mktemp("doc_commands")
    (tmp / "my_reward.py").write_text(
        doc_block("docs/rewards.md", "# my_reward.py — the batched contract") + COMPUTE_SCORE
    )
    return tmp


_done: set = set()  # the train.py arguments already run (an evaluate line runs its run's first)


def _tiny_args(args: list[str], tmp: Path) -> list[str]:
    extra = TINY_LM if any("config/llm.py" in a for a in args) else TINY
    logdir = [] if any(a.startswith("--config.logdir=") for a in args) else [f"--config.logdir={tmp}/logs"]
    return [*args, *extra, *logdir]


def _run_train(command, tmp: Path) -> None:
    processes, args = _train_args(command, tmp)
    assert processes == 1
    if tuple(args) in _done:  # the same line documented twice (or already run for an evaluate line)
        return
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # each run its own mixed precision, as in its own process
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = train_script.main(["scripts/train.py", *_tiny_args(args, tmp)])
    assert rc == 0, f"{_where(command)} at tiny size exits {rc}:\n{out.getvalue()[-3000:]}"
    _done.add(tuple(args))


@pytest.mark.slow
@pytest.mark.parametrize("command", by_way("train+tiny"))
def test_train_commands_run_at_tiny_size(command, doc_tmp):
    _run_train(command, doc_tmp)


@pytest.mark.slow
@pytest.mark.parametrize("command", by_way("launch+tiny"))
def test_launches_run_at_tiny_size(command, tmp_path):
    argv = substitute(command.argv, _rule(command).stand_ins, tmp_path)
    argv = [str(Path(sys.executable).parent / argv[0]), *argv[1:], *_tiny_args([], tmp_path)]
    env = {**os.environ, **command.env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{_where(command)} exits {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
    assert list((tmp_path / "logs").glob("*/final")), done.stdout[-2000:]


def _maker_of(command, model: str, tmp: Path):
    """The train.py line of ``command``'s file that writes the run ``model`` names (its logdir / run_name)."""
    for c in COMMANDS:
        if c.file != command.file or "scripts/train.py" not in c.words:
            continue
        args = dict(
            a[len("--config.") :].split("=", 1) for a in substitute(c.argv, {}, tmp) if a.startswith("--config.")
        )
        if f"{args.get('logdir')}/{args.get('run_name')}" == model:
            return c
    raise AssertionError(f"{_where(command)}: no train.py line of {command.file} writes {model}")


@pytest.mark.slow
@pytest.mark.parametrize("command", [p for p in by_way("parse+tiny") if "evaluate.py" in p.values[0].text])
def test_evaluate_commands_run_at_tiny_size(command, doc_tmp):
    args = substitute(command.argv, _rule(command).stand_ins, doc_tmp)
    args = args[args.index("scripts/evaluate.py") + 1 :]
    model = args[args.index("--model") + 1]
    if model.startswith(str(doc_tmp)):
        _run_train(_maker_of(command, model, doc_tmp), doc_tmp)
    if "--out" not in args:
        args += ["--out", str(doc_tmp / f"eval_{command.line}")]
    evaluate = load_module(REPO / "scripts" / "evaluate.py", "evaluate_of_docs")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            rc = evaluate.main([*args, "--limit", "2", "--per_group", "0"])
        except SystemExit as exc:
            rc = exc.code
    assert rc == 0, f"{_where(command)} at tiny size exits {rc}:\n{out.getvalue()[-3000:]}"
    assert (Path(args[args.index("--out") + 1]) / "eval.json").is_file(), out.getvalue()[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("command", [p for p in by_way("parse+tiny") if "serve_reward.py" in p.values[0].text])
def test_serve_reward_commands_serve(command, tmp_path):
    import urllib.request

    argv = substitute(command.argv, _rule(command).stand_ins, tmp_path)
    (tmp_path / "ground_truths").mkdir()
    env = {**os.environ, **command.env, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, *argv[1:]], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        line = ""
        while "serving" not in line:
            line = server.stdout.readline()
            assert line or server.poll() is None, f"{_where(command)} stopped: exit {server.poll()}"
        port = int(re.search(r":(\d+)\s*$", line).group(1))
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/health", headers={"Authorization": f"Bearer {command.env['DDPO_REWARD_TOKEN']}"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        health = json.loads(opener.open(request, timeout=30).read())
        assert health["status"] == "ok" and health["reward"] == "psnr", health
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("command", [p for p in by_way("pytest") if "tests/" not in p.values[0].text])
def test_the_whole_suite_collects(command):
    selected, skipped, out = _collect([str(REPO / a) if a == "tests" else a for a in _pytest_args(command)])
    assert selected >= 100, f"{_where(command)} collects {selected} tests:\n{out[-2000:]}"
