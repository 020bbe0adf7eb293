"""Run an untrusted Python program in a confined subprocess (the server side of the code reward).

:func:`run_program` writes the program into a fresh private temporary directory, starts
``python -I -S`` there (isolated mode, no ``site``: no user site-packages, no ``PYTHON*`` variables,
the cwd not on ``sys.path``) in a new session with a minimal environment (``PATH``, ``LC_ALL``, and
``HOME`` / ``TMPDIR`` pointing at the work directory: nothing inherited, so no tokens or keys), feeds
``stdin`` from a file, collects stdout / stderr through files (their size bounded by RLIMIT_FSIZE),
kills the whole process group with SIGKILL when the wall-time limit passes or the program ends, and
removes the directory. Inside the child, :mod:`reward_models.verifiable.sandbox_child` drops to an
unprivileged uid when the server runs as root, enters new user / network / PID namespaces where the
kernel allows them, sets the rlimits of :class:`SandboxLimits` and installs an audit hook before the
program's first line (see that module for the exact list).

What it guarantees, and what it does not (measured by ``tests/test_code_sandbox.py``; docs/rewards.md):

* wall time, CPU time, address space, file size, open files and process count are bounded by the
  kernel; on timeout every process of the session is killed, and with a PID namespace every process
  the program started, wherever it moved, dies with it;
* network: an empty network namespace when unprivileged user namespaces are enabled (this machine);
  otherwise only the audit hook (no ``socket`` import, no ``socket.*`` event), which native code
  could bypass — but ``ctypes`` and ``mmap`` cannot be imported and no other process can be started;
* files: the audit hook refuses reads outside the work directory and the interpreter's library, and
  writes, deletes, renames and listings outside the work directory. Without root there is no
  separate uid, so the kernel itself would let the program read what the server's user can read;
  the hook is the only barrier there. As root (this machine) the program runs as ``nobody`` and the
  kernel also refuses whatever is not world-readable;
* an audit hook is not a security boundary against a determined attacker with a native-code
  primitive (CPython's own documentation says so). The program is a model's response, not an
  adversary with an exploit; for untrusted users run the reward server in a container or VM.

Assert-style tests are counted by a line that carries a random token the program never sees in its
source; a program that walks the interpreter's frames could still find it, so scores that must
resist that should use stdin/stdout tests, which the program cannot forge without the expected
output (it stays in this process).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed run (all per run; each test case of a row is one run)."""

    wall_s: float = 5.0  # seconds of wall time before the process group is killed (SIGKILL)
    cpu_s: int = 5  # RLIMIT_CPU, seconds of CPU time
    memory_mb: int = 512  # RLIMIT_AS, MiB of address space (a Python interpreter needs ~30)
    max_processes: int = 8  # RLIMIT_NPROC, processes of the sandbox (counted in its user namespace)
    output_mb: int = 8  # RLIMIT_FSIZE, MiB per file written, stdout included
    open_files: int = 64  # RLIMIT_NOFILE
    uid: int | None = 65534  # uid (and gid) to run as when the server is root; None keeps root
    namespaces: bool = True  # try new user + network + PID namespaces
    guard: bool = True  # install the audit hook (tests switch it off to check the kernel's limits alone)
    python: str = field(default_factory=lambda: sys.executable)  # interpreter run with -I -S

    def rlimits(self) -> dict[str, int]:
        mib = 1 << 20
        return {
            "RLIMIT_CORE": 0,
            "RLIMIT_CPU": int(self.cpu_s),
            "RLIMIT_AS": int(self.memory_mb) * mib,
            "RLIMIT_NPROC": int(self.max_processes),
            "RLIMIT_FSIZE": int(self.output_mb) * mib,
            "RLIMIT_NOFILE": int(self.open_files),
        }


@dataclass
class RunResult:
    """What one run did: exit code (None when killed on timeout), outputs, and the isolation it had."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    isolation: dict = field(default_factory=dict)  # sandbox_child's record: uid, namespaces, rlimits
    pid: int = 0  # the session leader's pid (= its process group), for tests that look for leftovers


def _wait_or_kill(proc: subprocess.Popen, wall_s: float) -> bool:
    """Wait for ``proc`` up to ``wall_s``; then SIGKILL its whole process group; True if it timed out.

    The exit is observed with ``WNOWAIT`` so the leader is not reaped before ``killpg``: its pid (the
    group's id) cannot be reused by another process while the group is being killed. On timeout the
    members other than the leader die first, so that the leader (the launcher, the PID namespace's
    parent) reaps them; orphans left to the machine's init can take a second to disappear.
    """
    deadline = time.monotonic() + wall_s
    delay = 0.001
    timed_out = False
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            timed_out = True
            _kill_members(proc.pid)
            grace = time.monotonic() + 0.2
            while (
                time.monotonic() < grace and os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            ):
                time.sleep(0.005)
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    try:
        os.killpg(proc.pid, 9)  # everything left in the session's group (the leader is a zombie or alive)
    except ProcessLookupError:
        pass
    proc.wait()
    _until_gone(proc.pid)
    return timed_out


def _kill_members(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` except its leader (from /proc)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pgid:
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[2]) == pgid:
                        os.kill(int(entry), 9)
            except (OSError, IndexError, ValueError):
                pass


def _until_gone(pgid: int, timeout: float = 2.0) -> None:
    """SIGKILL the group until no member is left (killed processes, zombies included, take a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 9)
        except ProcessLookupError:
            return
        time.sleep(0.005)


def _read(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _remove(base: str) -> None:
    def force(func, path, _exc):  # a program may chmod its own files to 000
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)

    shutil.rmtree(base, onerror=force)


def run_program(
    program: str, stdin: str = "", limits: SandboxLimits | None = None, tests: dict | None = None
) -> RunResult:
    """Run ``program`` with ``stdin`` in a fresh sandbox (see the module docstring) and return its result.

    ``tests``: ``{"setup": str, "asserts": [str, ...]}`` to run after the program in its namespace;
    the result's ``stdout`` then ends with ``"<token> <passed>/<total>"`` (see :func:`asserts_passed`).
    """
    limits = limits or SandboxLimits()
    base = tempfile.mkdtemp(prefix="ddpo-sandbox-")  # mode 0700
    try:
        work = Path(base, "work")
        work.mkdir(mode=0o700)
        (work / "solution.py").write_text(program, encoding="utf-8")
        drop = os.geteuid() == 0 and limits.uid is not None
        if drop:
            for p in (work, work / "solution.py"):
                os.chown(p, limits.uid, limits.uid)
        token = secrets.token_hex(16)
        cfg = {"uid": limits.uid, "namespaces": limits.namespaces, "guard": limits.guard, "tests": tests}
        cfg.update(rlimits=limits.rlimits(), token=token)
        Path(base, "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        Path(base, "stdin").write_text(stdin, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(work), "TMPDIR": str(work)}
        cfg_fd = os.open(os.path.join(base, "config.json"), os.O_RDONLY)
        start = time.monotonic()
        try:
            with (
                open(os.path.join(base, "stdin"), "rb") as fin,
                open(os.path.join(base, "stdout"), "wb") as fout,
                open(os.path.join(base, "stderr"), "wb") as ferr,
            ):
                proc = subprocess.Popen(
                    [limits.python, "-I", "-S", "-c", _CHILD_SOURCE, str(cfg_fd)],
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    cwd=work,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(cfg_fd,),
                )
        finally:
            os.close(cfg_fd)
        timed_out = _wait_or_kill(proc, limits.wall_s)
        wall = time.monotonic() - start
        try:
            isolation = json.loads(_read(work / "isolation.json", 1 << 16) or "{}")
        except ValueError:
            isolation = {}
        return RunResult(
            returncode=None if timed_out else proc.returncode,
            stdout=_read(Path(base, "stdout"), int(limits.output_mb) << 20),
            stderr=_read(Path(base, "stderr"), 1 << 16),
            timed_out=timed_out,
            wall_s=wall,
            isolation={**isolation, "token": token} if tests is not None else isolation,
            pid=proc.pid,
        )
    finally:
        _remove(base)


def asserts_passed(result: RunResult) -> int:
    """Asserts passed by an assert-style run: from its last stdout line ``"<token> <passed>/<total>"``."""
    token = result.isolation.get("token")
    if not token or result.timed_out or result.returncode != 0:
        return 0
    lines = result.stdout.rstrip("\n").rsplit("\n", 1)
    head, _, counts = lines[-1].partition(" ")
    if head != token:
        return 0
    passed, _, _total = counts.partition("/")
    return int(passed) if passed.isdigit() else 0


__all__ = ["RunResult", "SandboxLimits", "asserts_passed", "run_program"]
