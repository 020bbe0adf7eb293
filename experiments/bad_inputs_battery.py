"""Run the bad-input battery of tests/test_bad_inputs.py as subprocesses against any checkout, and count.

    python experiments/bad_inputs_battery.py --repo /path/to/checkout [--only 10]

Each case of ``CASES`` (tests/test_bad_inputs.py) runs ``python <repo>/scripts/train.py <tiny config> <args>`` in
a fresh directory. It passes when the exit status is the expected one, the output names every expected word,
there is no traceback, and the run directory was not created. The same table, in-process, is the test; this
script exists to measure a checkout that predates the test (docs/experiments/ cite its counts).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def load_cases():
    sys.path.insert(0, str(HERE))  # the test module imports tests.conftest
    spec = importlib.util.spec_from_file_location("bad_inputs", HERE / "tests" / "test_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES, module._setup


def run_case(repo: Path, extra: list[str], setup) -> tuple[int, str, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="battery-"))
    setup(tmp)
    args = [a.replace("{tmp}", str(tmp)).replace(str(HERE / "config"), str(repo / "config")) for a in extra]
    cmd = [
        sys.executable,
        str(repo / "scripts" / "train.py"),
        f"--config={repo / 'config' / 'quickstart.py'}:tiny",
        f"--config.logdir={tmp / 'logs'}",
        "--config.run_name=r",
        "--config.logging.progress=False",
        *args,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
        return proc.returncode, proc.stdout + proc.stderr, tmp
    except subprocess.TimeoutExpired:
        return -1, "timeout", tmp


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument("--only", type=int, default=0, help="run only the first N cases")
    args = p.parse_args()
    cases, setup = load_cases()
    cases = cases[: args.only] if args.only else cases
    passed = 0
    for name, extra, status, words in cases:
        start = time.perf_counter()
        code, output, tmp = run_case(args.repo.resolve(), extra, setup)
        checks = {
            "status": code == status,
            "words": all(w in output for w in words),
            "no traceback": "Traceback" not in output,
            "no run dir": not (tmp / "logs" / "r").exists(),
        }
        ok = all(checks.values())
        passed += ok
        failed = ", ".join(k for k, v in checks.items() if not v)
        last = output.strip().splitlines()[-1][:150] if output.strip() else ""
        print(
            f"{'PASS' if ok else 'FAIL'} {name:32s} exit {code:3d} {time.perf_counter() - start:5.1f}s "
            f"{'' if ok else '(' + failed + ') ' + last}",
            flush=True,
        )
    print(f"{passed}/{len(cases)} cases passed for {args.repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
