"""The sandboxed program's own process: confine it, then run the untrusted code (stdlib only).

:mod:`reward_models.verifiable.code_sandbox` starts this file's text as
``python -I -S -c <this source> <config json>`` in a fresh session, with a cleared environment, its
cwd a private temporary directory, stdin/stdout/stderr redirected to files. Before one line of the
untrusted program runs, in this order:

1. the program (``solution.py``) and its appended test code are read from the work directory;
2. when the process runs as root and ``uid`` is set, common standard-library modules are imported
   (the interpreter's files may be unreadable afterwards), then supplementary groups, gid and uid
   are dropped to ``uid`` (65534, ``nobody``, by default): the program cannot read files that are
   not world-readable, cannot signal the server, and RLIMIT_NPROC binds it (the kernel never applies
   RLIMIT_NPROC to uid 0);
3. ``unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID)``, falling back to fewer namespaces when the
   kernel refuses: an empty network namespace (not even loopback is up) and a PID namespace whose
   init is the program's process, so that when it ends every process it started is killed by the
   kernel (even one that left the process group). What was granted is written to ``isolation.json``;
4. rlimits: CPU seconds, address space, processes (counted inside the new user namespace), file
   size (also bounds stdout), open files, no core dumps;
5. in the PID namespace's init (a fork), an audit hook (``sys.addaudithook``, which the program cannot
   remove) refuses: opening files for writing outside the work directory and for reading outside it
   and the interpreter's own library directories, listing or changing files outside it, sockets,
   starting processes (``os.system``, ``subprocess``, ``os.exec*``, ``os.fork``, ``posix_spawn``),
   signals, and importing ``ctypes`` / ``_ctypes`` / ``_posixsubprocess`` / ``mmap``.

Then the program runs as ``__main__``; for assert-style tests each test statement runs after it in
the same namespace and, when every statement ran, one line ``<token> <passed>/<total>`` is printed
(the token is read from an inherited pipe and not known to the program's author; see the module
docs of :mod:`reward_models.verifiable.code_sandbox` for what the token does and does not prove).
"""

import json
import os
import resource
import sys

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
#: imported before a uid drop (their files may be unreadable by the sandbox uid)
PRELOAD = (
    "array bisect collections copy dataclasses decimal enum fractions functools heapq io itertools json math "
    "operator random re statistics string struct textwrap typing"
).split()
BLOCKED_EVENTS = {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "subprocess.Popen", "pty.spawn", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "ctypes.dlopen",
    "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "mmap.__new__", "os.startfile", "webbrowser.open",
}  # fmt: skip
PATH_EVENTS = {  # event -> positions of the path arguments that must lie inside the work directory
    "os.listdir": (0,), "os.scandir": (0,), "os.mkdir": (0,), "os.remove": (0,), "os.rmdir": (0,),
    "os.rename": (0, 1), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
    "os.chdir": (0,), "os.chflags": (0,), "os.lchflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
    "glob.glob": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (0, 1), "shutil.move": (0, 1),
}  # fmt: skip
BLOCKED_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess", "mmap", "_socket", "socket", "select", "_ssl", "ssl"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _denied(what):
    return PermissionError(f"sandbox: {what} is not allowed")


def install_guard(work, read_roots):
    """Add the audit hook described in the module docstring (it cannot be removed afterwards)."""
    realpath, fspath, sep = os.path.realpath, os.fspath, os.sep
    work = realpath(work)

    def under(path, roots):
        try:
            path = realpath(fspath(path))
        except (TypeError, ValueError):
            return False
        return any(path == r or path.startswith(r.rstrip(sep) + sep) for r in roots)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return  # an already open descriptor (stdin/stdout/stderr)
            writes = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
            if not under(path, [work] if writes else [work, *read_roots]):
                raise _denied(f"opening {path!r}" + (" for writing" if writes else ""))
        elif event.startswith("socket.") or event in BLOCKED_EVENTS:
            raise _denied(event)
        elif event == "import" and str(args[0]).partition(".")[0] in BLOCKED_IMPORTS:
            raise _denied(f"importing {args[0]}")
        elif event in ("os.link", "os.symlink"):
            raise _denied(event)
        elif event in PATH_EVENTS:
            for i in PATH_EVENTS[event]:
                if i < len(args) and not isinstance(args[i], int) and not under(args[i], [work]):
                    raise _denied(f"{event} on {args[i]!r}")

    sys.addaudithook(hook)


def _unshare(libc, flags):
    return libc.unshare(flags) == 0


def confine(cfg):
    """Steps 2–4 of the module docstring; returns the isolation record."""
    record = {"uid": os.getuid(), "dropped_uid": False, "namespaces": []}
    import ctypes  # trusted code, before the uid drop and the guard; removed from sys.modules below

    libc = ctypes.CDLL(None, use_errno=True)
    uid = cfg.get("uid")
    if os.geteuid() == 0 and uid is not None:
        for name in PRELOAD:
            __import__(name)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        record.update(uid=uid, dropped_uid=True)
    for flags, names in (
        (CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID, ["user", "net", "pid"]),
        (CLONE_NEWUSER | CLONE_NEWNET, ["user", "net"]),
    ):
        if cfg.get("namespaces", True) and _unshare(libc, flags):
            record["namespaces"] = names
            break
    del libc, ctypes
    for mod in [m for m in sys.modules if m.partition(".")[0] in ("ctypes", "_ctypes")]:
        del sys.modules[mod]
    limits = dict(cfg["rlimits"])
    if "user" not in record["namespaces"]:  # RLIMIT_NPROC then counts every process of this uid
        limits["RLIMIT_NPROC"] += _processes_of(os.getuid())
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    record["rlimits"] = limits
    return record


def _processes_of(uid):
    """How many processes ``uid`` runs now (from /proc)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def run_untrusted(program, tests, token):
    """Run the program as ``__main__``; then, for assert-style tests (``{"setup": str, "asserts": [str]}``),
    the setup code and each assert statement in the same namespace, counting the asserts that pass."""
    namespace = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__}
    code = compile(program, "solution.py", "exec")
    try:
        exec(code, namespace)
    except SystemExit as exc:  # a program may end with sys.exit(0); its tests still run
        if tests is None or exc.code not in (None, 0):
            raise
    if tests is None:
        return
    exec(compile(tests["setup"], "test_setup", "exec"), namespace)
    passed = 0
    for i, stmt in enumerate(tests["asserts"]):
        try:
            exec(compile(stmt, f"test_{i}", "exec"), namespace)
            passed += 1
        except Exception:  # a failed assert, or the program's error under test
            pass
    sys.stdout.flush()
    sys.stdout.write(f"\n{token} {passed}/{len(tests['asserts'])}\n")


def main():
    fd = int(sys.argv[1])  # the configuration arrives on an inherited descriptor, closed before the program runs
    with os.fdopen(fd, "rb") as f:
        cfg = json.loads(f.read())
    work = os.getcwd()
    with open("solution.py", encoding="utf-8") as f:
        program = f.read()
    record = confine(cfg)
    with open("isolation.json", "w") as f:
        json.dump(record, f)
    if "pid" in record["namespaces"]:
        pid = os.fork()  # the child is init (pid 1) of the new PID namespace
        if pid:
            status = os.waitpid(pid, 0)[1]
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    if cfg.get("guard", True):
        install_guard(work, [p for p in sys.path if p])  # -I -S: only the standard library's directories
    sys.argv = ["solution.py"]
    run_untrusted(program, cfg.get("tests"), cfg.pop("token", ""))


if __name__ == "__main__":
    main()
