"""The code reward's sandbox: correct and wrong programs, and the hostile-program battery (issue 37).

Each hostile program prints the row's expected output only if its attack works, so a broken
sandbox makes its score 1 and the test fails. Limits are short (1.5 s wall) to keep the file fast.
"""

import os
import socket
import tempfile

import pytest

from reward_models.verifiable import SandboxLimits, VerifiableReward, code_reward, run_program

WALL = 1.5
FAST = {"wall_s": WALL, "cpu_s": 2, "memory_mb": 256, "workers": 2}
NPROC_WORKS = {"ok": False}


def _procs():
    """{pid: (uid, pgid, sid)} of every process on the machine."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[int(entry)] = (os.stat(f"/proc/{entry}").st_uid, int(fields[2]), int(fields[3]))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _leftovers(pids, uid=65534):
    """Processes still in a recorded sandbox session / group, or (as root) running as the sandbox uid."""
    pids = set(pids)
    return {p: v for p, v in _procs().items() if v[1] in pids or v[2] in pids or (os.geteuid() == 0 and v[0] == uid)}


@pytest.fixture()
def recorded(monkeypatch, tmp_path):
    """Sandbox temp dirs under tmp_path/tmp; the pids of every run; restore afterwards."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    pids = []
    real = code_reward.run_program

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        pids.append(result.pid)
        return result

    monkeypatch.setattr(code_reward, "run_program", spy)
    return tmp, pids


def _row(tests, source="code"):
    return {"data_source": source, "ground_truth": tests}


def test_correct_wrong_and_assert_programs(recorded):
    reward = VerifiableReward(**FAST)
    io = [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4", "output": "6"}]
    asserts = "import math\nassert add(1, 2) == 3\nassert add(2, 2) == 5\nassert math.isclose(add(0.1, 0.2), 0.3)"
    samples = [
        "Here:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
        "```python\nprint(0)\n```",
        "def add(a, b):\n    return a + b\n",
        "```python\ndef add(a, b):\n    import os\n    os._exit(0)\n```",  # exits before any assert runs
        '```python\nprint("x")\n```',
    ]
    rows = [_row(io), _row(io), _row(asserts), _row(asserts), _row({"inputs": ["1"], "outputs": ["x"]})]
    scores, info = reward(samples, [""] * 5, rows)
    assert scores.tolist() == pytest.approx([1.0, 0.0, 2 / 3, 0.0, 1.0])
    assert info["format"].tolist() == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert info["tests_total"].tolist() == [2, 2, 3, 3, 1]
    assert os.listdir(recorded[0]) == []


def test_rlimit_nproc_bounds_a_bounded_fork_loop(recorded):
    """Kernel layer alone (no audit hook): at most max_processes processes; none survive the run."""
    program = (
        "import os, time\nn = 0\nfor _ in range(40):\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        time.sleep(20)\n        os._exit(0)\n    n += 1\nprint(n)\n"
    )
    limits = SandboxLimits(wall_s=5, max_processes=6, guard=False)
    result = run_program(program, "", limits)
    assert result.returncode == 0, result.stderr
    assert 1 <= int(result.stdout) <= 6, result.stdout
    assert not _leftovers([result.pid]), "forked children outlived the sandbox"
    assert os.listdir(recorded[0]) == []
    NPROC_WORKS["ok"] = True


def test_network_namespace_alone_blocks_a_local_connection():
    """Kernel layer alone: no audit hook, interpreter readable (uid kept), connect to a listening socket."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
        result = run_program(program, "", SandboxLimits(wall_s=5, guard=False, uid=None))
        if "net" not in result.isolation.get("namespaces", []):
            pytest.skip(f"no network namespace on this kernel: {result.isolation}")
        assert "connected" not in result.stdout and result.returncode != 0
        with pytest.raises(socket.timeout):
            server.accept()


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop needs root")
def test_uid_drop_alone_hides_a_private_file(tmp_path):
    secret = tmp_path / "private.txt"
    secret.write_text("s3cret")
    secret.chmod(0o600)
    result = run_program(f"print(open({str(secret)!r}).read())", "", SandboxLimits(wall_s=5, guard=False))
    assert result.isolation["dropped_uid"] and "s3cret" not in result.stdout
    assert "PermissionError" in result.stderr


def test_hostile_battery_scores_zero_and_harms_nothing(recorded, tmp_path, monkeypatch):
    tmp, pids = recorded
    outside = tmp_path / "written_by_sandbox.txt"
    shared = tempfile.mkdtemp(dir="/tmp")  # world-readable: only the audit hook stands in the way
    try:
        os.chmod(shared, 0o755)
        readable = os.path.join(shared, "server_file.txt")
        with open(readable, "w") as f:
            f.write("server-secret-4711")
        os.chmod(readable, 0o644)
        monkeypatch.setenv("DDPO_TEST_TOKEN", "env-secret-0815")
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            server.settimeout(0.2)
            port = server.getsockname()[1]
            ok = [{"input": "", "output": "ok"}]
            cases = {
                "infinite loop": ("while True:\n    pass\nprint('ok')", ok),
                "fork bomb": ("import os\nwhile True:\n    os.fork()\nprint('ok')", ok),
                "memory balloon": ("x = bytearray(3 << 30)\nx[-1] = 1\nprint('ok')", ok),
                "write outside": (f"open({str(outside)!r}, 'w').write('x')\nprint('ok')", ok),
                "socket": (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 1)\nprint('ok')", ok),
                "subprocess": ("import subprocess\nsubprocess.run(['true'])\nprint('ok')", ok),
                "ctypes": ("import ctypes\nprint('ok')", ok),
                "read server file": (
                    f"print(open({readable!r}).read())",
                    [{"input": "", "output": "server-secret-4711"}],
                ),
                "read environment": (
                    "import os\nprint(os.environ.get('DDPO_TEST_TOKEN'))",
                    [{"input": "", "output": "env-secret-0815"}],
                ),
                "list server dir": (
                    f"import os\nprint(os.listdir({shared!r}))",
                    [{"input": "", "output": "['server_file.txt']"}],
                ),
            }
            samples = [f"```python\n{code}\n```" for code, _ in cases.values()]
            rows = [_row(tests) for _, tests in cases.values()]
            samples.append("```python\nprint('ok')\n```")  # an honest sample scored in the same batch
            rows.append(_row(ok))
            scores, info = VerifiableReward(**FAST)(samples, [""] * len(samples), rows)
            with pytest.raises(socket.timeout):
                server.accept()
        got = dict(zip([*cases, "honest"], scores.tolist()))
        assert got == {**dict.fromkeys(cases, 0.0), "honest": 1.0}
        assert info["timed_out"].tolist()[0] == 1.0
        assert not outside.exists()
        assert os.listdir(tmp) == [], "a sandbox directory was left behind"
        assert not _leftovers(pids), "a sandboxed process outlived its run"
    finally:
        for name in os.listdir(shared):
            os.remove(os.path.join(shared, name))
        os.rmdir(shared)


def test_fork_bomb_without_the_audit_hook_is_contained(recorded):
    """A real fork bomb against the kernel's limits only, run once the bounded check above passed."""
    if not NPROC_WORKS["ok"]:
        pytest.skip("RLIMIT_NPROC was not shown to work (test_rlimit_nproc_bounds_a_bounded_fork_loop)")
    program = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_program(program, "", SandboxLimits(wall_s=1, max_processes=6, guard=False))
    assert result.timed_out
    assert not _leftovers([result.pid])
    assert os.listdir(recorded[0]) == []
