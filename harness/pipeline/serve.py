"""What a worker process runs (`python -m harness.pipeline.serve IMPL_FD JUDGE_FD PARENT_PID`,
started by harness.worker, or forked by a worker template, harness.pipeline.template, with these
imports done): two processes, one per side of the pipeline.

It imports torch and the harness, then forks before it has computed anything. The process itself
is the judge (harness.pipeline.judge): it keeps the judging socket and never imports an
implementation. The child closes the judging socket, starts a session of its own (what a plug-in
signals there — killpg(0) — stays there) and becomes the implementation's process
(harness.pipeline.call): it imports the implementations and runs their calls, and is a child
subreaper, so that a descendant a plug-in detaches (setsid, fork) stays in its tree, where
harness.worker finds and ends it. It dies with the judge (the parent-death signal); the judge
outlives it, and tells the command how it ended. Being its parent, the judge cannot be ptraced by
it (Linux's Yama default), and a crash of a pair's calls cannot take a verdict the judge owes with it.

Messages from the command's process (which is trusted) are pickled; what the implementation's
process sends is bytes — b"ready", then a CallRecord per pair (harness.pipeline.wire) — which the
command forwards to the judge unread, behind a ("record",) message. The judge answers each pair
with its PairResult."""
from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection

from harness.worker import exit_now, prctl

READY = b"ready"


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux prctl PR_SET_PDEATHSIG; the parent's thread
    that started it must outlive it, which harness.runner's do), and leave now if the parent
    already has (reparented before the prctl took effect)."""
    prctl(1, signal.SIGKILL)                  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def first_to_go() -> None:
    """Offer this process to the kernel's OOM killer before the parent, so that a case too big for
    memory kills the worker — an error row — and not the sweep."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:      # raising it needs no privilege
            f.write("500")
    except OSError:
        pass


def escaped(e: BaseException) -> str:
    """Why a pair ended in an exception its side did not turn into data (a plug-in that no longer
    imports, or a bug of the harness)."""
    from harness.references.errors import said
    tb = traceback.format_exc(limit=-3).strip().replace("\n", " | ")      # where: the innermost frames
    return f"the pair raised {type(e).__name__}: {said(e)[:200]} ({tb[-600:]})"


def warm_cuda() -> None:
    """Create this process's CUDA context before a pair needs it (an implementation's process of a
    spare worker, while the command still imports and plans; a judge, while its first pair's inputs
    are drawn). On a machine without CUDA, nothing; a failure here is the first pair's to report."""
    try:
        import torch
        if torch.cuda.is_available():
            torch.empty(1, device="cuda")
    except Exception:              # noqa: BLE001 — the pair that needs CUDA says why
        pass


def preload(names: list[str]) -> None:
    """List the built-in implementations `names` now (a spare of a sweep, before its settings
    arrive, on the import path the command will send): that imports what they wrap (fla and
    Triton: seconds), which the first pair would otherwise wait for."""
    from harness.impls.registry import prepare
    for name in names:
        try:
            prepare(name)
        except BaseException:       # noqa: BLE001 — resolving the pair's implementation says why
            pass


def implementation_loop(conn: Connection, warm: tuple[str, ...] = (), cuda_before_fork: str = "") -> int:
    """The implementation's side: each pair's calls (harness.pipeline.call) and its record back.
    `cuda_before_fork`: why CUDA had started in the worker before it forked this process (which then
    cannot use it: harness.pipeline.cudafork); on a CUDA device each pair is then an error row
    saying so, none of the implementation's code run (a case outside its declared variants still
    skips); on the CPU nothing changes."""
    from harness.impls.registry import resolve
    from harness.pipeline.call import CallRecord, run_calls
    from harness.pipeline.cudafork import unusable
    from harness.pipeline.wire import encode
    prctl(36, 1)                              # 36: PR_SET_CHILD_SUBREAPER: before any library's import
    flags = dict(f.split("=", 1) if "=" in f else (f, "") for f in warm)
    if "path" in flags:                       # the path the command will send (Worker.start checks)
        sys.path[:] = list(dict.fromkeys(json.loads(flags["path"]) + sys.path))
    # the CUDA context in a thread, beside the imports: the driver's work (most of it outside the
    # GIL) overlaps them, where one after the other they added up; both done before it is ready
    cuda = (threading.Thread(target=warm_cuda, name="warm-cuda", daemon=True)
            if "cuda" in flags and not cuda_before_fork else None)
    if cuda is not None:
        cuda.start()
    if flags.get("preload"):
        preload(flags["preload"].split(","))
    if cuda is not None:
        cuda.join()
    try:
        _, settings, path, pinned = conn.recv()
    except EOFError:
        return 0
    sys.path[:] = list(dict.fromkeys(list(path) + sys.path))
    if pinned is not None:                     # harness bisect: a commit's package, from its roots only
        from harness.pinned import pin_imports
        pin_imports(*pinned)
    conn.send_bytes(READY)
    no_cuda = unusable(cuda_before_fork, settings.device)
    impls: dict = {}
    while True:
        try:
            raw = conn.recv_bytes()
        except EOFError:
            return 0
        try:
            msg = pickle.loads(raw)            # an API factory's module must import here: inside the try
            if msg[0] == "exit":
                return 0
            _, case, impl = msg
            if isinstance(impl, str):
                impl = impls[impl] if impl in impls else impls.setdefault(impl, resolve(impl))
            rec = run_calls(case, impl, settings, no_cuda)
        except BaseException as e:             # SystemExit too: an implementation's exit is a row, not a pass
            rec = CallRecord("error", f"{no_cuda}; then {escaped(e)}" if no_cuda else escaped(e))
        conn.send_bytes(encode(rec))


def judge_loop(conn: Connection, child: int) -> int:
    """Messages in order: ("pair", case, declaration) — its references start at once, while the
    calls run; ("record",) and the record's bytes — the pair's PairResult back; ("reap",) — the
    implementation's process ended: its exit status back (as Popen.returncode), and this loop ends.
    Its work on the GPU holds the worker's GPU (harness.pipeline.gpushare) against the timed calls."""
    from harness.pipeline.call import CallRecord
    from harness.pipeline.gpushare import JUDGE_WAIT, alone
    from harness.pipeline.heap import keep_freed_memory
    from harness.pipeline.judge import Judge
    from harness.pipeline.settings import analysis_device
    from harness.pipeline.wire import WireError, decode
    keep_freed_memory()
    try:
        _, settings = conn.recv()
        judge = Judge(settings)
        judge.check_environment(pool=True)
    except EOFError:
        return 0
    except BaseException as e:
        conn.send(("crash", escaped(e)))
        return 1
    conn.send(("ready", os.getpid(), child))

    def gone() -> bool:
        """Whether the implementation's process has ended (it is not reaped: ("reap",) does that)."""
        try:
            return os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    case = impl = None
    on_gpu = False                             # this judge's CUDA context started
    gpu_case = False                           # the pair's case is analysed on the GPU
    while True:
        try:
            msg = conn.recv()
            if msg[0] == "record":
                raw = conn.recv_bytes()
        except EOFError:
            return 0
        if msg[0] == "exit":
            return 0
        if msg[0] == "reap":
            conn.send(("exit", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])))
            return 0
        if msg[0] == "pair":
            _, case, impl = msg
            gpu_case = analysis_device(case, settings.device) != "cpu"
            if gpu_case and not on_gpu:
                # its CUDA context in a thread, while this case's inputs are drawn on the CPU; not
                # sooner: a judge of small cases needs none, and the driver creates a machine's
                # contexts largely one at a time (16 at once took ~3 s each on the H200), so the
                # implementation processes' would wait behind it
                on_gpu = True
                threading.Thread(target=warm_cuda, name="warm-cuda", daemon=True).start()
            try:                               # started before the record arrives: overlaps the calls
                if impl.unsupported(case) is None:     # the declared variants only: it holds no `supports`
                    with alone(gpu_case, JUDGE_WAIT, gone):
                        judge.references(case, impl)
            except Exception:                  # noqa: BLE001 — raised again, and reported, in judge()
                pass
            continue
        try:
            try:
                rec = decode(raw)
            except WireError as e:
                rec = CallRecord("error", f"the implementation's process sent a malformed record ({e})")
            with alone(gpu_case and rec.status == "ran", JUDGE_WAIT, gone):
                got = judge.judge(case, impl, rec)
            conn.send(("result", got))
        except BaseException as e:
            conn.send(("crash", escaped(e)))


def import_worker_modules() -> None:
    """What both sides import before the fork (torch with them): a worker started by a template
    (harness.pipeline.template) finds them imported."""
    import harness.impls.registry  # noqa: F401
    import harness.pipeline.call  # noqa: F401
    import harness.pipeline.judge  # noqa: F401
    import harness.pipeline.wire  # noqa: F401


def main(impl_fd: int, judge_fd: int, parent: int, warm: tuple[str, ...] = ()) -> int:
    """The imports first (a spare worker does them while the command checks its input), then the
    fork, then each side's loop. `warm` (a sweep's spare worker), before they wait for their
    settings: "cuda", the implementation's process creates its CUDA context; "preload=NAME,...",
    it lists those built-in implementations, on the import path "path=JSON". (A judge creates its
    context when its first case analysed on the GPU arrives.)"""
    die_with_parent(parent)
    first_to_go()
    impl, judge = Connection(impl_fd), Connection(judge_fd)
    try:
        import_worker_modules()
    except BaseException as e:
        impl.send_bytes(b"crash " + escaped(e).encode())
        judge.send(("crash", escaped(e)))
        return 1
    from harness.pipeline.cudafork import cuda_started
    from harness.pipeline.gpushare import create
    create()                                   # one lock, both sides: made before the fork
    started = cuda_started()
    me = os.getpid()
    child = os.fork()
    if child == 0:                             # the implementation's process
        judge.close()
        os.setsid()
        die_with_parent(me)
        return implementation_loop(impl, warm, started)
    impl.close()                               # the judge: no implementation's code runs here
    return judge_loop(judge, child)


if __name__ == "__main__":
    exit_now(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), tuple(sys.argv[4:])))
