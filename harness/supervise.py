"""The command's process, watched from outside. A plug-in's module is imported in the command's own
process (its declarations are read there), and what it starts runs there too: code at import, a
thread, an exit hook. Any of them can end the process — `os._exit(0)` at import, from a thread in
the middle of a sweep, from an exit hook after the verdict — with a status that says nothing of the
verdict, and nothing inside the process can stop that. So the command runs in a child of a parent
that only waits: the child sends its exit code through a pipe as its last act, and the parent exits
with that code. A child that ended without sending one did not finish, whatever its status: the
parent says so in one line and exits 2 (SPEC §4: a run that did not finish never exits 0).

The parent imports nothing heavy, starts nothing, and ignores SIGINT (the terminal sends it to the
child too, which ends its own way, 130); SIGTERM and SIGHUP it passes to the child, and where the
child then ends by that signal, the parent ends by it too. Under a profiler or tracer (cProfile,
coverage) the command runs unwatched, in the process that reports on it; so it does where the
process already runs another thread when the command starts (a start-up hook of the interpreter, a
sitecustomize or .pth file, that started CUDA's driver or a thread of its own): a child forked then
could not use CUDA (harness.pipeline.cudafork), or could inherit a lock that thread held."""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable

EXIT_UNFINISHED = 2                    # harness.commands.EXIT_USAGE: a sweep that did not finish
PASSED_ON = (signal.SIGTERM, signal.SIGHUP)
# The pid the user sees for this command (the watching parent's), where something names the
# command to the user (a run directory's lock file); set in the watched child's environment.
COMMAND_PID = "HARNESS_COMMAND_PID"
_PIPE: list = []                       # [(pid, fd)]: the watched child's end of the pipe, in it only


def send(code: int) -> None:
    """Tell the watching parent the command's exit code, now: before an exit of the harness's own
    that skips the usual way out (os._exit). Nothing in a process that is not the watched command
    (a process it forked holds the pipe too); the parent reads the first code sent."""
    if _PIPE and _PIPE[0][0] == os.getpid():
        try:
            os.write(_PIPE[0][1], b"%d\n" % code)
        except OSError:
            pass


def watched(main: Callable[[], int], exit_now: Callable[[int], None], each: Callable[[], None]) -> int:
    """main()'s exit code, from a child process that ends with exit_now(code); in the parent, the
    code the child sent, or EXIT_UNFINISHED where it sent none. `each` runs once in each process
    after the fork (what registers exit hooks naming this process). Where fork is missing, or under
    a profiler or tracer, main() here."""
    if not hasattr(os, "fork") or sys.getprofile() is not None or sys.gettrace() is not None or _threaded():
        each()
        return main()
    r, w = os.pipe()
    child = os.fork()
    each()
    if child == 0:
        os.close(r)
        _die_with_parent()
        _PIPE.append((os.getpid(), w))
        os.environ[COMMAND_PID] = str(os.getppid())
        code = main()
        send(code)                            # before the exit hooks: what they do cannot change it
        exit_now(code)
    os.close(w)
    return _wait(child, r)


def _threaded() -> bool:
    """Whether this process runs another thread than this one (native ones included, where /proc
    lists them)."""
    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        import threading
        return threading.active_count() > 1


def _die_with_parent() -> None:
    """SIGKILL this process when the watching parent dies (Linux; elsewhere nothing)."""
    from harness.worker import prctl
    prctl(1, signal.SIGKILL)                  # 1: PR_SET_PDEATHSIG


def _wait(child: int, r: int) -> int:
    received = []

    def pass_on(sig, _frame):
        received.append(sig)
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in PASSED_ON:
        signal.signal(sig, pass_on)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    os.set_blocking(r, False)                 # what the child sent is in the pipe: read it, never wait
    try:
        sent = os.read(r, 64)
    except BlockingIOError:
        sent = b""
    os.close(r)
    first = sent.split(b"\n")[0]
    if first.lstrip(b"-").isdigit():
        return int(first)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in received:
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))     # ended as the child was: by the signal it was sent
    print(f"harness: error: the command's process ended before it finished ({_how(status)}) and gave no "
          f"verdict: something running in it — a plug-in's module at import, a thread or an exit hook it "
          f"started — ended it; what it wrote is not a complete run", file=sys.stderr, flush=True)
    return EXIT_UNFINISHED


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
