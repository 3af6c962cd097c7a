"""Isolated workers, their processes: each (case, implementation) pair runs in a worker, so that
whatever the implementation does — raise, sys.exit or os._exit, abort, segfault, hang, exhaust
memory, detach a process of its own — the sweep records an `error` row naming it and goes on with a
fresh worker (the pairs' protocol: harness.pipeline.remote).

A worker is two processes (harness.pipeline.serve): the judge, and the implementation's process it
forks before anything runs, in a session of its own. They import torch and the harness once and
then run pair after pair for as long as the command sends them, so the cost of isolation is one
process start per sweep and per crash, not per pair; the command line starts the first workers
before it imports anything heavy itself (prespawn), so that their imports overlap its own. The
command talks to each over its own socket pair. A worker runs in a session of its own and its
output goes to a pipe the command drains onto its standard error (a chatty plug-in cannot garble
the summary, and a process it detaches holds that pipe, never the caller's). Stopping a worker
ends every process of its tree — the implementation's process is a child subreaper, so a detached
grandchild is in it — and its process groups; a worker is the kernel's first choice when memory
runs out, and dies with its parent (Linux's parent-death signal), so no worker outlives an
interrupted or killed sweep."""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import NoReturn

from harness import worker_template
from harness.worker_template import drain

DEFAULT_TIMEOUT = 600.0          # seconds a pair may take (first calls compile and autotune)
# Seconds a new worker may take to import torch and the harness before it counts as broken; not
# part of a pair's --timeout (a loaded CI box can take longer than a short --timeout to start one).
START_TIMEOUT = 300.0
_SIGNALS = {getattr(signal, n): n for n in dir(signal)
            if n.startswith("SIG") and not n.startswith(("SIG_", "SIGRT"))}


def prctl(option: int, value: int) -> None:
    """Linux's prctl(2) (PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER); nothing elsewhere."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)
    except Exception:
        pass


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


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cuda_visible(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value leaves visible, read as CUDA reads it: a list of
    ordinals (each stripped), of GPU- UUIDs or of MIG- ids, whichever kind the value starts with;
    the first entry not of that kind (an empty one, a -1, a UUID after ordinals) ends the list, and
    an entry given twice leaves no device visible."""
    entries = value.split(",")
    kind = next((k for k in ("GPU-", "MIG-") if value.startswith(k)), None)
    seen: list[str] = []
    for e in entries:
        e = e if kind else e.strip()
        if not (e.startswith(kind) if kind else e.isdigit()):
            break
        e = e if kind else str(int(e))
        if e in seen:
            return []
        seen.append(e)
    return seen


def visible_gpus(env: dict | None = None) -> list[str]:
    """The GPUs the command (`env`: its environment, by default as it started) sees, in CUDA's
    order — cuda:0 first —, each as a value of CUDA_VISIBLE_DEVICES: that variable's devices where
    it is set (cuda_visible; even empty: none), else 0..N-1 for this process's
    torch.cuda.device_count() (counted through NVML where it can, so CUDA stays uninitialised)."""
    env = base_env() if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return cuda_visible(env["CUDA_VISIBLE_DEVICES"])
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return []
    import torch
    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_device(index: int, env: dict | None = None) -> str:
    """GPU `index` of `--gpus` (cuda:INDEX as the command sees it) as a worker's CUDA_VISIBLE_DEVICES:
    the device at that place of the command's own CUDA_VISIBLE_DEVICES where it is set (a Slurm or
    container allocation: GPU 0 is the first allocated, not the machine's first), else the index,
    unchecked (counting the machine's GPUs needs torch: check_run_options does it). IndexError for
    a negative index or one past the variable's devices (check_run_options says so in one line)."""
    env = base_env() if env is None else env
    if index < 0:
        raise IndexError(f"GPU index {index}")
    if "CUDA_VISIBLE_DEVICES" not in env:
        return str(index)
    return visible_gpus(env)[index]


def worker_env(threads: int, compile_threads: int, gpu: str | None) -> dict:
    """A worker's environment: its OpenMP team (its share of the cores), told to sleep rather than
    spin while it waits (OMP_WAIT_POLICY=PASSIVE: on a shared 2-core CI box a spinning team of every
    core ran quick 3-4 times slower), its share of the cores for Inductor's compile pool, its GPU
    (a value of CUDA_VISIBLE_DEVICES: gpu_device)."""
    env = base_env()
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def sweep_envs(jobs: int, threads: int | None, gpus: tuple[int, ...] = ()) -> list[dict]:
    """The environments of a sweep's first workers, worker k's at k (harness.runner's): worker k on
    GPU gpus[k mod len(gpus)] of those the command sees (gpu_device)."""
    jobs = max(1, jobs)
    share = max(1, cores() // jobs)
    devices = [gpu_device(g) for g in gpus]           # every index checked, not only the first jobs'
    return [worker_env(threads or share, share, devices[k % len(devices)] if devices else None)
            for k in range(jobs)]


# Started, importing, not yet given settings.
_SPARE: list[tuple[dict, "Process"]] = []
# os.environ as it was when the command started its first workers (prespawn), until drop_spares:
# every worker of the command is built from it, so that a worker the sweep asks for has the
# environment of the spare started for it, whatever a library the command imported since wrote
# into os.environ (which no worker should inherit either). On the H200 machine no spare was ever
# taken before (docs/performance.md section 8).
_BASE_ENV: dict | None = None


def base_env() -> dict:
    """A copy of the environment a worker of this command starts from."""
    return dict(os.environ if _BASE_ENV is None else _BASE_ENV)


class Process:
    """One worker's processes, as the command sees them: the judge (the process started, a session
    leader, and the implementation's process's parent), the two sockets, and the thread that
    drains their output onto our stderr. The judge is forked from a worker template
    (harness.worker_template: torch and the harness already imported) wherever one can serve, else
    a fresh interpreter (`fresh`, or no template: `forked` says which)."""

    def __init__(self, env: dict, warm: tuple[str, ...] = (), path: list[str] | None = None, fresh: bool = False):
        """`warm`, `path`: a spare's (harness.pipeline.serve's flags; `path`, the import path it
        lists its built-ins on, None where it lists none)."""
        env = dict(env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        flags = (*warm, *(["path=" + json.dumps(path)] if path else []))
        got = None if fresh else worker_template.fork(env, flags, START_TIMEOUT)
        self.forked = got is not None
        if got is not None:
            self.proc, impl, judge, out = got
        else:
            impl, impl_child = socket.socketpair()
            judge, judge_child = socket.socketpair()
            # -P: the current directory is not put first on the path, so a `harness` folder there
            # (another checkout's) is never the worker's harness; the command sends its own path,
            # plug-ins included
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "harness.pipeline.serve", str(impl_child.fileno()),
                 str(judge_child.fileno()), str(os.getpid()), *flags],
                pass_fds=(impl_child.fileno(), judge_child.fileno()), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            impl_child.close()
            judge_child.close()
            out = self.proc.stdout
        self.impl, self.judge = Connection(impl.detach()), Connection(judge.detach())
        self.impl_pid: int | None = None
        self.path = path
        threading.Thread(target=drain, args=(out,), name="worker-output", daemon=True).start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def waiting(self) -> bool:
        """A spare that can still be given settings: both processes alive (its implementation's process
        says nothing before its settings, so a readable socket is one that ended or failed)."""
        return self.proc.poll() is None and not self.impl.poll(0)

    def impl_ended(self) -> int | None:
        """How the implementation's process ended (Popen.returncode's convention), from the judge,
        its parent; None where that cannot be learnt."""
        try:
            self.judge.send(("reap",))
            if self.judge.poll(30):
                kind, *code = self.judge.recv()
                return code[0] if kind == "exit" else None
        except (EOFError, OSError, ValueError):
            pass
        return None

    def end(self) -> int | None:
        """Kill every process of the worker's tree and group; reap it; its exit status."""
        for c in (self.impl, self.judge):
            c.close()
        if self.forked:
            self.proc.kill()     # by its template, which alone knows the pid is still this worker's
        else:
            kill_tree(self.proc.pid)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return None


def descendants(pid: int) -> list[int]:
    """Every running process below `pid` in the process tree (from /proc: Linux; a zombie, dead
    and waiting to be reaped, is not running and has no children)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if state not in (b"Z", b"X"):
            children.setdefault(int(ppid), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int, group: bool = True) -> None:
    """SIGKILL `pid`'s descendants (a worker's implementation process is a subreaper: what its
    plug-in detached is among them), until none is left, then (`group`) `pid`'s process group. The
    leader dies last, so that the tree stays whole while it is walked (and itself, should it not
    lead its group yet: a worker forked an instant before its setsid)."""
    for _ in range(10):
        below = descendants(pid)
        if not below:
            break
        for p in below:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    if not group:
        return
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def end_orphans_at_exit() -> None:
    """Make this process a child subreaper (Linux): a process a plug-in detached that outlived its
    worker (one that crashed before it could be stopped) is reparented here rather than to init,
    and every descendant still running when this process exits is ended. For the command line's own
    process: a library caller's process is left as it is."""
    prctl(36, 1)                                  # 36: PR_SET_CHILD_SUBREAPER
    atexit.register(kill_tree, os.getpid(), False)


def prespawn(envs: list[dict], preload: tuple[str, ...] = (), cuda: bool = False,
             path: list[str] | None = None) -> None:
    """Start a worker per environment now, from the main thread (a worker dies with the thread that
    started it), for Worker.start to take; drop_spares() ends those no sweep took. While this
    process still imports and plans (harness.pipeline.serve): their implementation processes list
    the built-in implementations named in `preload` on the import path `path` (the one the sweep
    will send: Worker.start takes such a spare only for that path) and, with `cuda` (a sweep that
    may run on CUDA), create their CUDA contexts. The environment they start from is kept
    (base_env): build `envs` after the first call of a command, or from os.environ before it."""
    global _BASE_ENV
    if _BASE_ENV is None:
        _BASE_ENV = dict(os.environ)
    warm = ((f"preload={','.join(preload)}",) if preload else ()) + (("cuda",) if cuda else ())
    for env in envs:
        _SPARE.append((env, Process(env, warm, list(path if path is not None else sys.path) if preload else None)))


def drop_spares() -> None:
    global _BASE_ENV
    while _SPARE:
        _SPARE.pop()[1].end()
    _BASE_ENV = None


atexit.register(drop_spares)


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
