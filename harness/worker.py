"""Isolated workers: each (case, implementation) pair runs in a child process, so that whatever the
implementation does — raise, sys.exit or os._exit, abort, segfault, hang, exhaust memory — the
sweep records an `error` row naming it and goes on with a fresh worker.

A worker is `python -m harness.worker FD`: it imports torch and the implementations once and then
runs pair after pair (harness.pair.PairRunner) for as long as the parent sends them, so the cost of
isolation is one process start per sweep and per crash, not per pair. Parent and worker talk over a
socket pair (multiprocessing's Connection: pickled messages); the worker's stdout goes to the
parent's stderr, so a chatty plug-in cannot garble the summary. A worker runs in a session of its
own (the parent kills its whole process group on a timeout) and dies with its parent (Linux's
parent-death signal), so no worker outlives an interrupted or killed sweep."""
from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection

DEFAULT_TIMEOUT = 600.0          # seconds a pair may take (first calls compile and autotune)
_SIGNALS = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and not n.startswith("SIG_")}


def describe_exit(code: int | None) -> str:
    """What a worker's end says about the pair it was running."""
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        name = _SIGNALS.get(-code, f"signal {-code}")
        extra = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the implementation's process was killed by {name}{extra}"
    return (f"the implementation's process exited with status {code} "
            f"(os._exit, or an exit the harness could not catch)")


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux prctl PR_SET_PDEATHSIG), and leave now if it
    already has (reparented before the prctl took effect)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass
    if os.getppid() != parent:
        os._exit(1)


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, settings, env: dict | None = None):
        self.settings, self.env = settings, env
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None

    def start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # the worker imports what this process can (a factory pytest imported from a test folder
        # that is on sys.path only here): multiprocessing's spawn hands sys.path over the same way
        given = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(given + [p or os.getcwd() for p in sys.path]))
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.worker", str(child.fileno()), str(os.getpid())],
                                     pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=2,
                                     env=env, start_new_session=True)
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send(("settings", self.settings))

    def run(self, case, impl, timeout: float) -> tuple[list[dict] | None, dict, str | None]:
        """(rows, stage times, None), or (None, {}, why) when the worker died or hung on the pair
        (it is then stopped; the next call starts a new one). The implementation travels as its
        --impl text (resolved again in the worker) unless it has none (an API factory: pickled)."""
        if self.proc is None:
            self.start()
        try:
            self.conn.send(("pair", case, impl.spec if impl.spec else impl))
            if not self.conn.poll(timeout):
                self.stop()
                return None, {}, f"timed out after {timeout:g} s (--timeout); the worker was killed"
            kind, *payload = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self._reap()
            return None, {}, describe_exit(code)
        if kind == "rows":
            return payload[0], payload[1], None
        self.stop()                              # a harness bug in the worker: its traceback is the reason
        return None, {}, f"internal harness error: {payload[0]}"

    def _reap(self) -> int | None:
        proc, self.proc = self.proc, None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def close(self) -> None:
        """Ask the worker to leave, then make sure it has."""
        if self.proc is not None:
            try:
                self.conn.send(("exit",))
                self.proc.wait(timeout=10)
            except Exception:
                pass
            self.stop()


def picklable(impl) -> bool:
    try:
        pickle.dumps(impl)
        return True
    except Exception:
        return False


def main(fd: int, parent: int) -> int:
    """The worker's loop (its own process)."""
    _die_with_parent(parent)
    from harness.impls.registry import resolve
    from harness.pair import PairRunner
    conn = Connection(fd)
    runner, impls = None, {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return 0
        except Exception:                        # a message this process cannot unpickle
            conn.send(("crash", "the worker could not load the pair: " +
                       traceback.format_exc(limit=2).strip().splitlines()[-1]))
            continue
        if msg[0] == "exit":
            return 0
        if msg[0] == "settings":
            runner = PairRunner(msg[1])
            continue
        _, case, impl = msg
        try:
            if isinstance(impl, str):
                impl = impls[impl] if impl in impls else impls.setdefault(impl, resolve(impl))
            rows, times = runner.run(case, impl)
        except Exception:
            conn.send(("crash", traceback.format_exc(limit=8).strip().replace("\n", " | ")))
            continue
        conn.send(("rows", rows, times))


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
