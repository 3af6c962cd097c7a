"""The command's process, watched from outside. A plug-in's module is imported in the command's own
process (its declarations are read there), and what it starts runs there too: code at import, a
thread, an exit hook. Any of them can end the process — `os._exit(0)` at import, from a thread in
the middle of a sweep, from an exit hook after the verdict — with a status that says nothing of the
verdict, and nothing inside the process can stop that. So the command runs in a child of a parent
that only waits: the child sends its exit code through a pipe as its last act before its exit
hooks, and the parent exits with that code. A child that ended without sending one did not finish,
whatever its status: the parent says so in one line and exits 2 (SPEC §4: a run that did not
finish never exits 0); one that sent its code but is still in its exit hooks GRACE seconds later
is ended, with its descendants, and the code stands.

The parent imports nothing heavy and starts nothing. Signals reach the command as before: SIGTERM
and SIGHUP sent to the parent are passed to the child, and where the child then ends by that signal
the parent ends by it too; a SIGINT from the terminal reaches the child itself (its process group),
one sent to the parent alone (kill, a caller's send_signal) is passed on. The command runs
unwatched, as before, under a profiler or tracer (cProfile, coverage: they report on the process
they started), where fork is missing, and where the process already runs another thread when the
command starts (a start-up hook of the interpreter, a sitecustomize or .pth file, that started
CUDA's driver or a thread of its own): a child forked then could not use CUDA
(harness.pipeline.cudafork), or could inherit a lock that thread held."""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable

from harness.commands import EXIT_INTERNAL, EXIT_INTERRUPTED
from harness.commands import EXIT_USAGE as EXIT_UNFINISHED      # a sweep that did not finish

GRACE = 30.0                           # seconds the child's exit hooks may take once its code is sent
WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
SENT_BY_A_PROCESS = (0, -1, -6)        # si_code SI_USER (kill), SI_QUEUE, SI_TKILL; the terminal's: SI_KERNEL
# The pid the user sees for this command (the watching parent's), where something names the
# command to the user (a run directory's lock file, harness.reports.rundir); set in the watched
# child's environment, read only where it is the reader's parent (the child, not what it starts).
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
    after the fork (what registers exit hooks naming this process)."""
    if not hasattr(os, "fork") or sys.getprofile() is not None or sys.gettrace() is not None or _threaded():
        each()
        return main()
    r, w = os.pipe()
    parent = os.getpid()
    # the child's status is the parent's to read: a caller that ignores SIGCHLD would have it reaped unseen
    chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)     # pending until the parent waits for them
    child = os.fork()
    if child == 0:
        os.close(r)
        signal.signal(signal.SIGCHLD, chld)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _die_with(parent)
        each()
        _PIPE.append((os.getpid(), w))
        os.environ[COMMAND_PID] = str(parent)
        code = _outcome(main)
        send(code)                            # before the exit hooks: what they do cannot change it
        exit_now(code)
    os.close(w)
    each()
    return _wait(child, r)


def _outcome(main: Callable[[], int]) -> int:
    """main()'s code, also where it ends otherwise than by returning: argparse's --help and usage
    errors (SystemExit), an interrupt outside its own handling, a bug (its traceback)."""
    try:
        return main()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException:                     # noqa: BLE001 — said, and the command's own code
        import traceback
        traceback.print_exc()
        return EXIT_INTERNAL


def _threaded() -> bool:
    """Whether this process runs another thread than this one (native ones included, where /proc
    lists them)."""
    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        import threading
        return threading.active_count() > 1


def _die_with(parent: int) -> None:
    """End this process when the watching parent dies: SIGKILL from the kernel (Linux), else a
    thread that watches for it; at once if the parent is already gone."""
    from harness.worker import prctl
    prctl(1, signal.SIGKILL)                  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(EXIT_UNFINISHED)
    if not sys.platform.startswith("linux"):
        import threading

        def watch():
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(EXIT_UNFINISHED)
        threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _wait(child: int, r: int) -> int:
    os.set_blocking(r, False)
    sent, received, status, deadline = b"", [], None, None
    while status is None:
        try:
            sent += os.read(r, 64)
        except (BlockingIOError, InterruptedError):
            pass
        try:
            pid, st = os.waitpid(child, os.WNOHANG)
            status = st if pid else None
        except ChildProcessError:             # reaped already (started with SIGCHLD ignored)
            status = 0
        if status is not None:
            break
        if b"\n" in sent:                     # the verdict is in: the exit hooks get GRACE seconds
            deadline = deadline or time.monotonic() + GRACE
            if time.monotonic() > deadline:
                from harness.worker import kill_tree
                kill_tree(child)
        sig = _next_signal()
        if sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            received.append(sig)
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass
    try:
        sent += os.read(r, 64)
    except (BlockingIOError, InterruptedError):
        pass
    os.close(r)
    first = sent.split(b"\n")[0]
    if first.lstrip(b"-").isdigit():
        return int(first)
    return _unfinished(status, received)


def _next_signal() -> int | None:
    """A signal the parent holds for the child (a terminal's SIGINT is the child's own already), or
    None after a short wait."""
    if not hasattr(signal, "sigtimedwait"):
        time.sleep(0.1)
        return None
    info = signal.sigtimedwait(WATCHED, 0.1)
    if info is None or info.si_signo == signal.SIGCHLD:
        return None
    if info.si_signo == signal.SIGINT and info.si_code not in SENT_BY_A_PROCESS:
        return None
    return info.si_signo


def _unfinished(status: int, received: list) -> int:
    """The code of a child that sent none: ended by a signal the parent passed on, the parent ends
    by it too; else one line saying how it ended, and EXIT_UNFINISHED (interrupted: 130)."""
    from harness.worker import kill_tree
    kill_tree(os.getpid(), False)             # what it left (reparented here) goes with it
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in received and sig != signal.SIGINT:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)         # ended as the child was: by the signal it was sent
        if sig == signal.SIGINT:
            print("harness: interrupted", file=sys.stderr, flush=True)
            return EXIT_INTERRUPTED
        why = {signal.SIGKILL: " (out of memory? the kernel's OOM killer sends SIGKILL)",
               signal.SIGSEGV: " (a crash in native code: an extension's, a plug-in's)"}.get(sig, "")
        print(f"harness: error: the command's process was killed by {_name(sig)}{why} before its verdict; what "
              f"it wrote is not a complete run", file=sys.stderr, flush=True)
        return EXIT_UNFINISHED
    print(f"harness: error: the command's process ended before it finished (exit status "
          f"{os.waitstatus_to_exitcode(status)}) and gave no verdict: something running in it — a plug-in's "
          f"module at import, a thread or an exit hook it started — ended it; what it wrote is not a complete "
          f"run", file=sys.stderr, flush=True)
    return EXIT_UNFINISHED


def _name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
