"""A worker template (`python -P -m harness.pipeline.template CONTROL_FD PARENT_PID`, started by
harness.worker_template): one process that does what every worker does before it forks — import
torch and the harness (harness.pipeline.serve) — once, and then forks a worker for each request of
the command. A worker then starts in milliseconds, where a fresh interpreter importing torch took
3.4 s of CPU on the 2-core machine: what every `--jobs N` spare, every worker restarted after a
crash, a hang or a CUDA error, and every sweep of a process that runs several (the pytest plugin,
the Python API) paid.

Invariants. The template never runs an implementation's code, never computes, and never starts
CUDA (a process forked after CUDA has started cannot use it: a request that finds it started is
refused, and the command starts a fresh interpreter instead); it forks from its only thread. A
forked worker is what harness.pipeline.serve is after its imports, in a pristine process: it takes
the environment it was asked for (which may differ from the template's only where nothing was read
at import: harness.worker_template.LATE_KEYS), starts a session of its own, writes its output to
a pipe of its own, dies with the template, and runs serve's main. The template dies with the
command (the parent-death signal), reaps its children and tells the command each one's exit status.

Messages on the control socket (SOCK_SEQPACKET, one pickle per message; both ends are the
harness's own processes): in, (key, env, flags) with the new worker's three file descriptors
(implementation socket, judge socket, output pipe); out, ("ready", pid), ("crash", why),
("forked", key, pid), ("refused", key, why), ("exit", pid, code)."""
from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import sys

MAX_MESSAGE = 1 << 20


def _send(control: socket.socket, msg: tuple) -> None:
    control.send(pickle.dumps(msg))


def _report_exits(control: socket.socket) -> None:
    """Reap every child that ended; its exit status to the command (Popen.returncode's convention)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(control, ("exit", pid, os.waitstatus_to_exitcode(status)))


def _cuda_started() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _become_worker(fds: list[int], env: dict, flags: tuple, template: int) -> int:
    """In the forked child: the worker's session, output, standard input and environment, then
    harness.pipeline.serve's main (which dies with the template)."""
    from harness.pipeline.serve import main
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    impl_fd, judge_fd, out_fd = fds
    os.setsid()
    for target in (1, 2):
        os.dup2(out_fd, target)
    os.close(out_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(env)
    importlib.invalidate_caches()          # files written since the template started are found
    return main(impl_fd, judge_fd, template, flags)


def main(control_fd: int, parent: int) -> int:
    from harness.pipeline.serve import die_with_parent, escaped, first_to_go, import_worker_modules
    from harness.worker import exit_now
    die_with_parent(parent)
    first_to_go()                              # inherited by every worker it forks
    control = socket.socket(fileno=control_fd)
    try:
        import_worker_modules()
    except BaseException as e:                 # noqa: BLE001 — the command starts fresh workers, which say why
        _send(control, ("crash", escaped(e)))
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)      # its wake-up byte ends select()
    me = os.getpid()
    _send(control, ("ready", me))
    while True:
        readable, _, _ = select.select([control, wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
            _report_exits(control)
        if control not in readable:
            continue
        msg, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
        if not msg:                            # the command is gone
            return 0
        key, env, flags = pickle.loads(msg)
        if len(fds) != 3 or _cuda_started():
            for fd in fds:
                os.close(fd)
            _send(control, ("refused", key, "CUDA started in the template" if len(fds) == 3 else "no descriptors"))
            continue
        pid = os.fork()
        if pid == 0:
            control.close()
            os.close(wake_r)
            os.close(wake_w)
            try:
                code = _become_worker(fds, env, tuple(flags), me)
            except BaseException as e:        # noqa: BLE001 — its sockets' end tells the command
                print(f"harness: a forked worker failed: {escaped(e)}", file=sys.stderr)
                code = 1
            exit_now(code)
        for fd in fds:
            os.close(fd)
        _send(control, ("forked", key, pid))


if __name__ == "__main__":
    from harness.worker import exit_now
    exit_now(main(int(sys.argv[1]), int(sys.argv[2])))
