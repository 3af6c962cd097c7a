"""A worker's GPU shared by its judge and its implementation's process (harness/pipeline/gpushare.py):
their GPU work never overlaps the timed calls, and neither side waits past its limit."""
from __future__ import annotations

import multiprocessing
import os
import time

from harness.pipeline import call, gpushare, gputime, speed


def _hold(seconds, started, released, exit_holding):
    with gpushare.alone(True, 5.0) as held:
        assert held
        started.set()
        time.sleep(seconds)
        if exit_holding:
            os._exit(0)                               # dies holding it: nothing releases a semaphore
        released.value = time.monotonic()


def _other_side(seconds, exit_holding=False):
    """The lock made before a fork, held by the forked side for `seconds`: (process, the monotonic
    time it let go)."""
    ctx = multiprocessing.get_context("fork")
    started, released = ctx.Event(), ctx.Value("d", 0.0)
    p = ctx.Process(target=_hold, args=(seconds, started, released, exit_holding))
    p.start()
    assert started.wait(10)
    return p, released


def test_one_side_waits_while_the_other_holds_the_gpu(monkeypatch):
    monkeypatch.setattr(gpushare, "_LOCK", None)
    gpushare.create()
    p, released = _other_side(0.3)
    before = gpushare.waited()
    with gpushare.alone(True, 5.0) as held:
        got_at = time.monotonic()
    p.join()
    assert held and got_at >= released.value > 0
    assert 0.1 < gpushare.waited() - before < 5.0          # the wait, counted


def test_a_dead_holder_ends_the_wait_at_once(monkeypatch):
    monkeypatch.setattr(gpushare, "_LOCK", None)
    gpushare.create()
    p, _ = _other_side(0.0, exit_holding=True)
    p.join()
    t0 = time.monotonic()
    with gpushare.alone(True, 30.0, gone=lambda: not p.is_alive()) as held:
        waited = time.monotonic() - t0
    assert not held and waited < 5.0


def test_a_wait_ends_at_its_limit_and_the_work_goes_on_unheld(monkeypatch):
    monkeypatch.setattr(gpushare, "_LOCK", None)
    gpushare.create()
    p, _ = _other_side(3.0)
    t0 = time.monotonic()
    with gpushare.alone(True, 0.3) as held:
        waited = time.monotonic() - t0
    p.terminate()
    p.join()
    assert not held and 0.25 <= waited < 2.5


def test_off_the_gpu_nothing_is_held_and_inline_the_gpu_is_the_pairs(monkeypatch):
    monkeypatch.setattr(gpushare, "_LOCK", None)
    with gpushare.alone(True, 5.0) as alone:           # inline: one process, no lock, no other side
        assert alone
    with gpushare.alone(False, 5.0) as alone:          # CPU work: nothing held, nothing claimed
        assert not alone
    gpushare.create()
    with gpushare.alone(False, 5.0) as held:
        assert not held and gpushare._LOCK.acquire(timeout=0)    # free: not taken for CPU work
    gpushare._LOCK.release()


class _RecordingLock:
    """A lock that is always free and says whether it is held."""
    held = False

    def acquire(self, timeout):
        self.held = True
        return True

    def release(self):
        self.held = False


def _timed_calls(monkeypatch):
    """later_calls of a small eager call on a fake CUDA device, 3 timed calls: its Speed."""
    from tests.test_gputime import FakeCuda
    from harness.cases.generate import generate
    from harness.impls.torch_ref import chain
    from tests.conftest import make_case
    FakeCuda(monkeypatch)
    monkeypatch.setattr(speed, "copy_bandwidth", lambda device: 4e12)
    base = generate(make_case(shape=(4, 32)))
    m = chain(32, eps=base.eps, zero_centered_gamma=False, dtype=base.weight.dtype, device="cpu")
    first = {"y": m(base.x, base.gate).detach()}
    return call.later_calls(m, m.weight, base, base.x.dtype, first, "cuda", 3, True, "t")[1]


def test_the_timed_calls_hold_the_gpu(monkeypatch):
    """On a GPU, the wall-timed calls and the GPU time are measured with the worker's GPU held."""
    held_during: list = []
    lock = _RecordingLock()
    monkeypatch.setattr(gpushare, "_LOCK", lock)
    monkeypatch.setattr(gputime, "gpu_time", lambda *a, **k: held_during.append(lock.held) or (1e-4, "graph"))
    monkeypatch.setattr(call, "_sync", lambda device: held_during.append(lock.held))
    got = _timed_calls(monkeypatch)
    assert held_during[0] is False                     # the second, compared call: not timed
    assert all(held_during[1:]) and len(held_during) >= 1 + 2 * 3 + 1
    assert got.gpu_seconds == 1e-4 and not lock.held


def test_inline_timed_calls_give_a_gpu_figure(monkeypatch):
    """No lock (an inline pair, harness.verify, the pytest plugin): nothing to share the GPU with,
    so the GPU time is measured (it was not, on the H200, after the lock was made mandatory)."""
    monkeypatch.setattr(gpushare, "_LOCK", None)
    monkeypatch.setattr(gputime, "gpu_time", lambda *a, **k: (1e-4, "graph"))
    monkeypatch.setattr(call, "_sync", lambda device: None)
    got = _timed_calls(monkeypatch)
    assert got.gpu_seconds == 1e-4 and got.gpu_method == "graph"


def test_timed_calls_that_could_not_hold_the_gpu_give_no_gpu_figure(monkeypatch):
    import math

    class Busy:                                        # the judge never lets go within the wait
        def acquire(self, timeout):
            return False
    monkeypatch.setattr(gpushare, "_LOCK", Busy())
    monkeypatch.setattr(gpushare, "SLICE", 0.01)
    monkeypatch.setattr(call, "TIMING_WAIT", 0.05)
    monkeypatch.setattr(gputime, "gpu_time", lambda *a, **k: (1e-4, "graph"))
    monkeypatch.setattr(call, "_sync", lambda device: None)
    got = _timed_calls(monkeypatch)
    assert got.impl_seconds > 0 and math.isnan(got.gpu_seconds) and got.gpu_method == ""


class _Declared:
    """An implementation's declaration as the judge receives it (pickled, by reference)."""

    def unsupported(self, case):
        return None


def test_the_judge_holds_the_gpu_for_its_gpu_work_on_records_that_ran(monkeypatch):
    """judge_loop over a pipe, with a stub Judge and every case analysed on the GPU: the references
    and the judging of a record that ran hold the worker's GPU; an error record's does not."""
    import threading
    from multiprocessing import Pipe
    from harness.pipeline import judge as judge_module, serve, settings as settings_module
    from harness.pipeline.call import CallRecord
    from harness.pipeline.settings import Settings
    from harness.pipeline.wire import encode
    from tests.conftest import make_case

    lock, seen = _RecordingLock(), []

    class StubJudge:
        def __init__(self, s):
            pass

        def check_environment(self, pool=False):
            pass

        def references(self, case, impl):
            seen.append(("references", lock.held))

        def judge(self, case, impl, rec):
            seen.append(("judge", rec.status, lock.held))
            return rec.status
    monkeypatch.setattr(gpushare, "_LOCK", lock)
    monkeypatch.setattr(judge_module, "Judge", StubJudge)
    monkeypatch.setattr(settings_module, "analysis_device", lambda case, device: "cuda")
    monkeypatch.setattr(serve, "warm_cuda", lambda: None)
    ours, theirs = Pipe()
    t = threading.Thread(target=serve.judge_loop, args=(theirs, os.getpid()), daemon=True)
    t.start()
    ours.send(("settings", Settings(device="cuda")))
    assert ours.recv()[0] == "ready"
    case = make_case()
    for rec in (CallRecord("ran"), CallRecord("error", "raised")):
        ours.send(("pair", case, _Declared()))
        ours.send(("record",))
        ours.send_bytes(encode(rec))
        assert ours.recv() == ("result", rec.status)
    ours.send(("exit",))
    t.join(10)
    assert seen == [("references", True), ("judge", "ran", True), ("references", True), ("judge", "error", False)]


def test_a_wait_for_the_judge_is_not_in_the_implementation_s_timed_call_seconds(monkeypatch):
    """run_calls' timed-call seconds are what the implementation cost: the time its process spent
    waiting for the judge to let go of the GPU (gpushare.waited) is left out."""
    from harness.impls.registry import resolve
    from harness.pipeline.settings import Settings
    from tests.conftest import make_case

    def later_calls(*args, **kwargs):
        time.sleep(0.5)                                 # all but the calls' own time a wait for the judge
        monkeypatch.setattr(gpushare, "_WAITED", gpushare.waited() + 0.5)
        return {}, None
    monkeypatch.setattr(call, "later_calls", later_calls)
    rec = call.run_calls(make_case(shape=(4, 32)), resolve("torch"), Settings("cpu", repeats=1))
    assert rec.status == "ran" and 0 <= rec.timing_seconds < 0.4, rec.timing_seconds
