"""The command's side of worker templates (the process: harness.pipeline.template): a worker is
forked from a template that already imported torch and the harness, instead of a fresh interpreter
importing them again. A template serves every worker whose environment equals its own outside
LATE_KEYS, is started the first time one is asked for, and is kept for the life of the process
that started it — so that a sweep's N workers, a worker started again after a crash, and the next
sweep of a process that runs several (the pytest plugin, the Python API, the test suite) import
torch once between them. The template is started from a thread that lives as long as the process
(it dies with the thread that started it, Linux's parent-death signal), so that it outlives the
sweep's threads.

Where no template can serve (its imports failed, it found CUDA's driver running, it refused: CUDA
started in it), `fork` says None and the caller starts a fresh interpreter, as before templates. A
template that died once ready is replaced at the next request; one that ended before it was ready
without saying why (killed while importing: memory?) is started again once per environment, then
left to fresh interpreters."""
from __future__ import annotations

import atexit
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

# Variables that may differ between a worker and its template, as nothing reads them at import:
# CUDA_VISIBLE_DEVICES is read when CUDA starts, which a worker does after its fork;
# PYTEST_CURRENT_TEST names the running test (pytest sets it for each), read by nothing at import.
LATE_KEYS = frozenset({"CUDA_VISIBLE_DEVICES", "PYTEST_CURRENT_TEST"})
KEEP = 2                       # templates kept at once (each a process holding torch's import)
ENDED_UNREADY = "the template ended before it was ready"
MAX_MESSAGE = 1 << 16


def drain(pipe) -> None:
    """A process's output onto the command's standard error (file descriptor 2), until every
    process holding the pipe has ended."""
    fd = pipe.fileno()
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            return
        if not chunk:
            pipe.close()
            return
        try:
            os.write(2, chunk)
        except OSError:
            pass


_launches: queue.Queue = queue.Queue()
_launcher: list[threading.Thread] = []


def _launch(fn):
    """fn() in the one thread that starts templates, which lives as long as this process."""
    if not _launcher:
        def serve_launches():
            while True:
                f, box = _launches.get()
                try:
                    box.put((f(), None))
                except BaseException as e:      # noqa: BLE001 — raised again in the caller
                    box.put((None, e))
        _launcher.append(threading.Thread(target=serve_launches, name="template-launcher", daemon=True))
        _launcher[0].start()
    box: queue.Queue = queue.Queue()
    _launches.put((fn, box))
    got, e = box.get()
    if e is not None:
        raise e
    return got


class Template:
    """One template process, its control socket, and what it said: the pids it forked (by request
    key), the requests it refused, its children's exit statuses."""

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = _launch(lambda: subprocess.Popen(
            [sys.executable, "-P", "-m", "harness.pipeline.template", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=env, start_new_session=True))
        theirs.close()
        threading.Thread(target=drain, args=(self.proc.stdout,), name="template-output", daemon=True).start()
        self.control, self.cond, self.send_lock = ours, threading.Condition(), threading.Lock()
        self.alive, self.ready, self.crashed = True, False, ""
        # by request key (a pid is reused once reaped; a key never is)
        self.pids: dict[int, int] = {}
        self.refused: dict[int, str] = {}
        self.exits: dict[int, int] = {}
        self.sent = 0                        # requests sent: their keys are 0 .. sent - 1
        threading.Thread(target=self._listen, name="template-control", daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                raw = self.control.recv(MAX_MESSAGE)
            except ConnectionResetError:
                # the template ended with a request of ours unread (Linux then reports ECONNRESET,
                # once, before what it sent: its "crash" among it): read on
                continue
            except OSError:
                raw = b""
            try:
                kind, *rest = pickle.loads(raw)
            except Exception:       # noqa: BLE001 — closed (EOF: nothing to unpickle) or broken: gone
                kind, rest = "", []
            with self.cond:
                if kind == "forked":
                    self.pids[rest[0]] = rest[1]
                elif kind == "refused":
                    self.refused[rest[0]] = rest[1]
                elif kind == "exit":
                    self.exits[rest[0]] = rest[1]
                elif kind == "crash":
                    self.crashed = rest[0]
                elif kind == "ready":
                    self.ready = True
                else:
                    self.alive = False
                    if not self.ready and not self.crashed:     # its start failed, unexplained
                        self.crashed = ENDED_UNREADY
                self.cond.notify_all()
                if not self.alive:
                    return

    def busy(self) -> bool:
        """Whether a worker of it may be running or about to be (closing it would end them)."""
        with self.cond:
            return self.alive and any(k not in self.exits and k not in self.refused for k in range(self.sent))

    def fork(self, env: dict, flags: tuple[str, ...], timeout: float):
        """(Forked, implementation socket, judge socket, output pipe) of a new worker, the request
        sent (the template forks it once its imports are done), in the command's working directory
        and umask; None if it could not be sent."""
        impl, impl_child = socket.socketpair()
        judge, judge_child = socket.socketpair()
        out_r, out_w = os.pipe()
        mask = os.umask(0o22)
        os.umask(mask)
        try:
            with self.send_lock:
                key = self.sent
                self.sent += 1
                socket.send_fds(self.control, [pickle.dumps(("fork", key, env, os.getcwd(), mask, flags))],
                                [impl_child.fileno(), judge_child.fileno(), out_w])
        except Exception:           # noqa: BLE001 — closed, or the cwd is gone: a fresh interpreter says
            with self.cond:
                self.refused[key] = "not sent"
            for c in (impl, judge):
                c.close()
            os.close(out_r)
            return None
        finally:
            impl_child.close()
            judge_child.close()
            os.close(out_w)
        return Forked(self, key, timeout), impl, judge, os.fdopen(out_r, "rb", 0)

    def kill(self, key: int) -> None:
        """End the tree of the worker forked for `key`, if the template has not reaped it (only the
        template knows its pid is still that worker's)."""
        try:
            with self.send_lock:
                self.control.send(pickle.dumps(("kill", key)))
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.control.close()
        except OSError:
            pass
        try:
            self.proc.kill()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass


class Forked:
    """A forked worker as Popen shows a process: pid, poll(), wait(), returncode, kill(). Its pid
    is known once the template has forked it (`pid` waits for that, up to `timeout`; None if it
    never was); its exit status once the template has reaped it. A worker whose template died died
    with it (its parent-death signal); where the command is a child subreaper (the command line),
    it is then the command's own zombie, reaped here."""

    def __init__(self, template: Template, key: int, timeout: float):
        self.t, self.key, self.timeout = template, key, timeout
        self._orphan: int | None = None       # its exit status, reaped here after its template died

    def _settled(self) -> bool:
        t = self.t
        return self.key in t.pids or self.key in t.refused or not t.alive

    def forked_pid(self) -> int | None:
        """The pid if the template has forked it by now (no waiting)."""
        with self.t.cond:
            return self.t.pids.get(self.key)

    @property
    def pid(self) -> int | None:
        with self.t.cond:
            self.t.cond.wait_for(self._settled, self.timeout)
            return self.t.pids.get(self.key)

    def poll(self) -> int | None:
        t = self.t
        with t.cond:
            if self.key in t.exits:
                return t.exits[self.key]
            pid = t.pids.get(self.key)
            if pid is None:
                return 1 if (self.key in t.refused or not t.alive) else None
            if t.alive:
                return None
        return self._after_template(pid)

    def _after_template(self, pid: int) -> int | None:
        """The status of a worker whose template died: reaped here if it became this process's
        child (a subreaper's) — or is about to —, else gone unless /proc shows it running."""
        if self._orphan is not None:
            return self._orphan
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                self._orphan = os.waitstatus_to_exitcode(status)
                return self._orphan
            return None                              # this process's child, still running
        except ChildProcessError:
            pass
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            state, ppid = fields[0], int(fields[1])
        except (OSError, IndexError, ValueError):
            state, ppid = b"X", 0
        if state not in (b"Z", b"X"):
            return None                              # still running
        if state == b"Z" and (ppid == os.getpid() or (ppid == self.t.proc.pid and self.t.proc.poll() is None)):
            # dead, and this process's child once the template's exit (still under way: the pid is
            # the template's while unreaped) has reparented it (a subreaper's): reaped at the next
            # poll, so that no zombie is left behind
            return None
        self._orphan = -signal.SIGKILL               # gone: its pid may be another process's from now
        return self._orphan

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def kill(self) -> None:
        """End its tree (the template does: only it knows the pid is still this worker's)."""
        self.t.kill(self.key)

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("forked worker", timeout)
            with self.t.cond:
                self.t.cond.wait(0.1 if left is None else min(left, 0.1))


_TEMPLATES: dict[frozenset, Template] = {}
_STARTED_AGAIN: set[frozenset] = set()       # environments whose template once ended before it was ready
_LOCK = threading.Lock()


def key_of(env: dict) -> frozenset:
    return frozenset((k, v) for k, v in env.items() if k not in LATE_KEYS)


def fork(env: dict, flags: tuple[str, ...], timeout: float):
    """A worker forked from the template for `env` (started now if there is none): Template.fork's
    tuple, or None where no template can serve (the caller starts a fresh interpreter)."""
    key = key_of(env)
    with _LOCK:                              # the request sent under it: a template is never closed
        t = _TEMPLATES.get(key)              # between being chosen and being asked
        if t is not None and not t.alive:
            if t.crashed and (t.crashed != ENDED_UNREADY or key in _STARTED_AGAIN):
                return None                  # its imports fail (fresh interpreters say why), CUDA ran, or twice unready
            if t.crashed:
                _STARTED_AGAIN.add(key)
            del _TEMPLATES[key]
            t = None
        if t is None:
            idle = [k for k, v in _TEMPLATES.items() if not v.busy()]
            while len(_TEMPLATES) >= KEEP and idle:
                _TEMPLATES.pop(idle.pop(0)).close()
            try:
                t = _TEMPLATES[key] = Template({k: v for k, v in env.items() if k not in LATE_KEYS})
            except OSError:
                return None
        return t.fork(env, flags, timeout)


def close_templates() -> None:
    with _LOCK:
        while _TEMPLATES:
            _TEMPLATES.popitem()[1].close()


atexit.register(close_templates)
