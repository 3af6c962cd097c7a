"""Isolated workers: each (case, implementation) pair runs in a child process, so that whatever the
implementation does — raise, sys.exit or os._exit, abort, segfault, hang, exhaust memory — the
sweep records an `error` row naming it and goes on with a fresh worker.

A worker is `python -m harness.worker FD PARENT_PID`: it imports torch and the implementations once
and then runs pair after pair (harness.pair.PairRunner) for as long as the parent sends them, so
the cost of isolation is one process start per sweep and per crash, not per pair; the command line
starts the first workers before it imports anything heavy itself (prespawn), so that their imports
overlap its own. Parent and worker talk over a socket pair (multiprocessing's Connection: pickled
messages); the worker's stdout goes to the parent's standard error (file descriptor 2), so a
chatty plug-in cannot garble the summary. A worker runs in a session of its own (the parent kills
its whole process group on a timeout), is the kernel's first choice when memory runs out, and
dies with its parent (Linux's parent-death signal), so no worker outlives an interrupted or killed
sweep. A pair's --timeout counts from sending it, not from the worker's start."""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Callable, NoReturn

DEFAULT_TIMEOUT = 600.0          # seconds a pair may take (first calls compile and autotune)
# Seconds a new worker may take to import torch and the harness before it counts as broken; not
# part of a pair's --timeout (a loaded CI box can take longer than a short --timeout to start one).
START_TIMEOUT = 300.0
_SIGNALS = {getattr(signal, n): n for n in dir(signal)
            if n.startswith("SIG") and not n.startswith(("SIG_", "SIGRT"))}


def describe_exit(code: int | None) -> str:
    """What a worker's end says about the pair it was running."""
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        name = _SIGNALS.get(-code, f"signal {-code}")
        extra = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return f"the implementation's process was killed by {name}{extra}"
    return (f"the implementation's process exited with status {code} "
            f"(os._exit, or an exit the harness could not catch)")


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux prctl PR_SET_PDEATHSIG; the parent's thread
    that started it must outlive it, which harness.runner's do), and leave now if the parent
    already has (reparented before the prctl took effect). Also offer this process to the kernel's
    OOM killer before the parent, so that a case too big for memory kills the worker — an error
    row — and not the sweep."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)     # 1: PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != parent:
        os._exit(1)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:      # raising it needs no privilege
            f.write("500")
    except OSError:
        pass


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_env(threads: int, compile_threads: int, gpu: int | None) -> dict:
    """A worker's environment: its OpenMP team (its share of the cores), told to sleep rather than
    spin while it waits (OMP_WAIT_POLICY=PASSIVE: on a shared 2-core CI box a spinning team of every
    core ran quick 3-4 times slower), its share of the cores for Inductor's compile pool, its GPU."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def sweep_envs(jobs: int, threads: int | None, gpus: tuple[int, ...] = ()) -> list[dict]:
    """The environments of a sweep's first workers, worker k's at k (harness.runner's)."""
    jobs = max(1, jobs)
    share = max(1, cores() // jobs)
    return [worker_env(threads or share, share, gpus[k % len(gpus)] if gpus else None) for k in range(jobs)]


# Started, importing, not yet given settings: (environment, process, connection).
_SPARE: list[tuple[dict, subprocess.Popen, Connection]] = []


def _spawn(env: dict) -> tuple[subprocess.Popen, Connection]:
    parent, child = socket.socketpair()
    env = dict(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen([sys.executable, "-m", "harness.worker", str(child.fileno()), str(os.getpid())],
                            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=2,
                            env=env, start_new_session=True)
    child.close()
    return proc, Connection(parent.detach())


def prespawn(envs: list[dict]) -> None:
    """Start a worker per environment now, from the main thread (a worker dies with the thread that
    started it), for Worker.start to take; drop_spares() ends those no sweep took."""
    for env in envs:
        _SPARE.append((env, *_spawn(env)))


def drop_spares() -> None:
    while _SPARE:
        _, proc, conn = _SPARE.pop()
        conn.close()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


atexit.register(drop_spares)


class WorkerStartError(RuntimeError):
    """A worker process could not start (before any implementation's code ran): the harness's or
    the environment's problem, never a row."""


class Worker:
    """The parent's handle on one worker process. `on_start(pid)` is called for every process it
    starts (the run directory's lock file lists them); `log(line)` hears of a worker that died
    between pairs (a thread of the last pair's implementation, say), which no row can carry."""

    def __init__(self, settings, env: dict | None = None, on_start: Callable[[int], None] | None = None,
                 log: Callable[[str], None] | None = None):
        self.settings, self.env, self.on_start, self.log = settings, env, on_start, log
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.last = ""                                  # the last pair it ran, for that line

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> str | None:
        """Start a worker (or take a spare one started with the same environment) and wait until it
        is ready; None, or why it could not start."""
        env = dict(os.environ if self.env is None else self.env)
        spare = next((k for k, (e, proc, _) in enumerate(_SPARE) if e == env and proc.poll() is None), None)
        if spare is not None:
            _, self.proc, self.conn = _SPARE.pop(spare)
        else:
            self.proc, self.conn = _spawn(env)
        if self.on_start is not None:
            self.on_start(self.proc.pid)
        try:
            # the parent's import path: a plug-in or API factory found there is found by the worker too
            self.conn.send(("settings", self.settings, list(sys.path)))
            if not self.conn.poll(START_TIMEOUT):
                self.stop()
                return f"the worker did not start within {START_TIMEOUT:g} s"
            kind, *payload = self.conn.recv()
        except (EOFError, OSError):
            return "the worker died while starting: " + describe_exit(self._reap())
        if kind != "ready":
            self.stop()
            return f"the worker could not start: {payload[0] if payload else kind}"
        return None

    def run(self, case, impl, timeout: float) -> tuple[list[dict] | None, dict, str | None]:
        """(rows, stage times, None), or (None, {}, why) when the worker died or hung on the pair
        (it is then stopped; the next call starts a new one). `timeout` counts from sending the
        pair, not from starting the worker. The implementation travels as its --impl text (resolved
        again in the worker) unless it has none (an API factory: pickled)."""
        if self.proc is not None and self.proc.poll() is not None:      # not this pair's doing
            why = describe_exit(self._reap())
            if self.log:
                self.log(f"harness: warning: a worker died between pairs, after {self.last}: {why}")
        if self.proc is None:
            why = self.start()
            if why is not None:
                raise WorkerStartError(f"could not start a worker process: {why}")
        self.last = f"{impl.name} {case.case_id} [{case.label}]"
        try:
            self.conn.send(("pair", case, impl.spec if impl.spec else impl))
            if not self.conn.poll(timeout):
                self.stop()
                return None, {}, f"timed out after {timeout:g} s (--timeout); the worker was killed"
            kind, *payload = self.conn.recv()
        except (EOFError, OSError):
            return None, {}, describe_exit(self._reap())
        if kind == "rows":
            return payload[0], payload[1], None
        self.stop()                 # the pair escaped PairRunner's own handling: a fresh worker next
        return None, {}, payload[0]

    def _reap(self) -> int | None:
        proc, self.proc = self.proc, None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if proc is None:
            return None
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()

    def stop(self) -> None:
        """Kill the worker and everything it started (its own session), and reap it."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
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


def exit_now(code: int) -> NoReturn:
    """End this process with `code` once atexit's handlers have run (spare workers, Inductor's
    compile pool, logging) and stdout/stderr are flushed, skipping the interpreter's teardown of
    its modules: with torch loaded that teardown takes half a second, which a worker's parent
    waits out after every sweep and a user after every command. No thread may still be writing:
    a worker's and the command line's threads are all daemons, done or waited for by then.

    Under a profiler or tracer (cProfile, coverage, trace: they report after the program returns)
    it is a plain sys.exit. Output that cannot be flushed makes the exit code 120, as the
    interpreter's own shutdown does, except for a reader that went away (a closed pipe)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            pass
        except (OSError, ValueError):
            code = code or 120
    os._exit(code)


def picklable(impl) -> bool:
    try:
        pickle.dumps(impl)
        return True
    except Exception:
        return False


def _escaped(e: BaseException) -> str:
    """Why a pair ended in an exception PairRunner did not turn into rows (a SystemExit from an
    implementation's `supports`, a plug-in that no longer imports, or a bug of the harness)."""
    tb = traceback.format_exc(limit=-6).strip().replace("\n", " | ")
    return f"the pair raised {type(e).__name__}: {str(e).strip()[:200]} ({tb[-1500:]})"


def main(fd: int, parent: int) -> int:
    """The worker's loop (its own process): the imports first (a spare worker does them while the
    parent checks its input), then the settings, then pair after pair."""
    _die_with_parent(parent)
    conn = Connection(fd)
    try:
        from harness.impls.registry import resolve
        from harness.pair import PairRunner
    except BaseException as e:
        conn.send(("crash", _escaped(e)))
        return 1
    try:
        msg = conn.recv()
    except EOFError:
        return 0
    _, settings, path = msg
    sys.path[:] = list(dict.fromkeys(list(path) + sys.path))
    try:
        runner = PairRunner(settings)
    except BaseException as e:
        conn.send(("crash", _escaped(e)))
        return 1
    conn.send(("ready",))
    impls: dict = {}
    while True:
        try:
            raw = conn.recv_bytes()
        except EOFError:
            return 0
        try:
            msg = pickle.loads(raw)      # an API factory's module must import here: inside the try
            if msg[0] == "exit":
                return 0
            _, case, impl = msg
            if isinstance(impl, str):
                impl = impls[impl] if impl in impls else impls.setdefault(impl, resolve(impl))
            rows, times = runner.run(case, impl)
        except BaseException as e:          # SystemExit too: an implementation's exit is a row, not a pass
            conn.send(("crash", _escaped(e)))
            continue
        conn.send(("rows", rows, times))


if __name__ == "__main__":
    exit_now(main(int(sys.argv[1]), int(sys.argv[2])))
