"""A worker template (`python -P -m harness.pipeline.template CONTROL_FD PARENT_PID`, started by
harness.worker_template): one process that does what every worker does before it forks — import
torch and the harness (harness.pipeline.serve) — once, and then forks a worker for each request of
the command. A worker then starts in milliseconds, where a fresh interpreter importing torch took
3.4 s of CPU on the 2-core machine: what every `--jobs N` spare, every worker restarted after a
crash, a hang or a CUDA error, and every sweep of a process that runs several (the pytest plugin,
the Python API) paid.

Invariants. The template never runs an implementation's code, never computes, and never starts CUDA
(a process forked after CUDA has started cannot use it, harness.pipeline.cudafork: a template that
finds it started — by an interpreter's start-up hook, or by its imports — ends as one whose
imports failed, and a request that finds it started is refused; the command starts a fresh
interpreter instead); it forks from its only thread. A forked worker is what harness.pipeline.serve
is after its imports, in a pristine process: it takes the environment it was asked for (which may
differ from the template's only where nothing was read at import:
harness.worker_template.LATE_KEYS), starts a session of its own, writes its output to a pipe of its
own, dies with the template, and runs serve's main. The template dies with the command (the
parent-death signal), reaps its children and tells the command each one's exit status.

Messages on the control socket (SOCK_SEQPACKET, one pickle per message; both ends are the
harness's own processes): in, ("fork", key, env, cwd, umask, flags) with the new worker's three
file descriptors (implementation socket, judge socket, output pipe), and ("kill", key): end that
worker's tree if it is still an unreaped child (its pid cannot have been reused: only the template
reaps it); out, ("ready", pid), ("crash", why), ("forked", key, pid), ("refused", key, why),
("exit", key, code)."""
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
    """A message to the command. One that cannot be sent ends the template (and its workers, by
    their parent-death signal): the command then sees it gone and starts fresh workers, where a
    lost "forked" or "exit" would leave it waiting."""
    try:
        control.send(pickle.dumps(msg))
    except OSError:
        os._exit(1)


def _report_exits(control: socket.socket, children: dict[int, int]) -> None:
    """Reap every child that ended; its exit status to the command (Popen.returncode's convention),
    by the key of the request that forked it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        key = children.pop(pid, None)
        if key is not None:
            _send(control, ("exit", key, os.waitstatus_to_exitcode(status)))


def _become_worker(fds: list[int], env: dict, cwd: str, umask: int, flags: tuple, template: int) -> int:
    """In the forked child: the worker's session, output, standard input, environment, working
    directory and umask (the command's, as a fresh interpreter would inherit them), then
    harness.pipeline.serve's main (which dies with the template)."""
    from harness.pipeline.serve import main
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    impl_fd, judge_fd, out_fd = fds
    os.setsid()
    os.umask(umask)
    try:
        os.chdir(cwd)
    except OSError:             # gone since: the command's import path says where plug-ins are
        pass
    for target in (1, 2):
        os.dup2(out_fd, target)
    os.close(out_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(env)
    importlib.invalidate_caches()          # files written since the template started are found
    # numpy's legacy global generator, where the template's imports created it: a fresh interpreter
    # seeds it from the OS, and every fork would draw the template's sequence (Python's `random`
    # reseeds itself at fork; torch's default generator starts from a fixed seed in both). A start-up
    # hook that seeds it on purpose (a sitecustomize's np.random.seed(n)) is overridden here.
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    return main(impl_fd, judge_fd, template, flags)


def main(control_fd: int, parent: int) -> int:
    from harness.pipeline.cudafork import cuda_started
    from harness.pipeline.serve import die_with_parent, escaped, import_worker_modules
    from harness.worker import exit_now, kill_tree
    die_with_parent(parent)                    # not offered to the OOM killer: its death ends every worker
    control = socket.socket(fileno=control_fd)
    started = cuda_started()                   # by a start-up hook: the imports would be wasted
    try:
        if not started:
            import_worker_modules()
    except BaseException as e:                 # noqa: BLE001 — the command starts fresh workers, which say why
        _send(control, ("crash", escaped(e)))
        return 1
    started = started or cuda_started()        # or by an import: no worker forked from here could use it
    if started:
        _send(control, ("crash", f"no worker can be forked from the template: {started}"))
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)      # its wake-up byte ends select()
    me = os.getpid()
    children: dict[int, int] = {}              # pid -> key, until reaped
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
            _report_exits(control, children)
        if control not in readable:
            continue
        msg, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, 3)
        if not msg:                            # the command is gone
            return 0
        kind, key, *rest = pickle.loads(msg)
        if kind == "kill":
            pid = next((p for p, k in children.items() if k == key), None)
            if pid is not None:                # unreaped, so the pid is still this child's
                kill_tree(pid)
            continue
        why = cuda_started() or ("" if len(fds) == 3 else "no descriptors")
        pid = None
        if not why:
            try:
                pid = os.fork()
            except OSError as e:               # out of memory or processes: the command starts a fresh one
                why = f"fork failed: {e}"
        if pid == 0:
            signal.set_wakeup_fd(-1)
            control.close()
            os.close(wake_r)
            os.close(wake_w)
            try:
                code = _become_worker(fds, *rest, me)
            except BaseException as e:        # noqa: BLE001 — its sockets' end tells the command
                print(f"harness: a forked worker failed: {escaped(e)}", file=sys.stderr)
                code = 1
            exit_now(code)
        for fd in fds:
            os.close(fd)
        if pid is None:
            _send(control, ("refused", key, why))
        else:
            children[pid] = key
            _send(control, ("forked", key, pid))


if __name__ == "__main__":
    from harness.worker import exit_now
    exit_now(main(int(sys.argv[1]), int(sys.argv[2])))
