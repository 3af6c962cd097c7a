"""The GPU time of a forward + backward (harness.pipeline.gputime): which way was used, the fallback
from a capture that fails or does not reproduce the judged outputs, and that a failed capture is
always ended and the caller's stream put back. CUDA's stream, graph and event calls are stood in
for on the CPU (what they record is checked); the real capture runs in the CUDA test at the end."""
from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace

import pytest
import torch

from harness.pipeline import gputime, speed


class FakeCuda:
    """The CUDA calls gputime makes, recorded: the current stream, an open capture, replays."""

    def __init__(self, monkeypatch, end_raises: bool = False):
        self.current, self.capturing, self.replays, self.end_raises = "default", False, 0, end_raises
        self.capturing_on = None
        fake = self

        class Stream:
            def wait_stream(self, other):
                pass

        class Graph:
            def capture_begin(self, capture_error_mode="global"):
                assert capture_error_mode == "thread_local"
                fake.capturing, fake.capturing_on = True, fake.current

            def capture_end(self):
                if fake.current is not fake.capturing_on:      # torch: ends only on the capturing stream
                    raise RuntimeError("capture_end on a stream that is not capturing")
                fake.capturing = False
                if fake.end_raises:
                    raise RuntimeError("operation not permitted when stream is capturing")

            def replay(self):
                fake.replays += 1

        class Event:
            def __init__(self, enable_timing=False):
                self.at = 0

            def record(self):
                self.at = fake.replays

            def synchronize(self):
                pass

            def elapsed_time(self, end):           # 0.25 ms a replay
                return 0.25 * (end.at - self.at)

        @contextlib.contextmanager
        def stream(s):
            before, fake.current = fake.current, s
            try:
                yield
            finally:
                fake.current = before

        for name, value in dict(Stream=Stream, CUDAGraph=Graph, Event=Event, stream=stream,
                                synchronize=lambda: None, current_stream=lambda: Stream(),
                                is_current_stream_capturing=lambda: fake.capturing).items():
            monkeypatch.setattr(torch.cuda, name, value)


def step(fail_in_capture=None):
    def prepare():
        return SimpleNamespace(x=torch.ones(3))

    def run(call):
        if fail_in_capture is not None and fail_in_capture.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing (.item())")
        return {"y": call.x * 2}
    return prepare, run


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def profiler(monkeypatch):
    calls = []

    def fake(prepare, run, least):
        calls.append(least)
        return 1e-4
    monkeypatch.setattr(gputime, "profiler_seconds", fake)
    return calls


def test_a_capturable_call_is_timed_by_graph_replay(monkeypatch, profiler):
    cuda = FakeCuda(monkeypatch)
    prepare, run = step()
    seconds, method = gputime.gpu_time(prepare, run, {"y": torch.full((3,), 2.0)}, same, least=5)
    assert method == "graph" and seconds == pytest.approx(0.25e-3) and not profiler
    assert cuda.replays >= 2 + gputime.WINDOWS * 5 and cuda.current == "default" and not cuda.capturing


@pytest.mark.parametrize("end_raises", [False, True])
def test_a_call_that_cannot_be_captured_falls_back_to_the_profiler(monkeypatch, profiler, end_raises):
    cuda = FakeCuda(monkeypatch, end_raises)
    prepare, run = step(fail_in_capture=cuda)
    seconds, method = gputime.gpu_time(prepare, run, {"y": torch.full((3,), 2.0)}, same, least=5)
    assert (seconds, method) == (1e-4, "profiler") and profiler == [5]
    assert not cuda.capturing and cuda.current == "default"          # the capture ended, the stream restored


def test_a_replay_that_does_not_reproduce_the_judged_outputs_is_not_trusted(monkeypatch, profiler):
    FakeCuda(monkeypatch)
    prepare, run = step()
    seconds, method = gputime.gpu_time(prepare, run, {"y": torch.full((3,), 3.0)}, same, least=5)
    assert (seconds, method) == (1e-4, "profiler")


def test_a_call_that_cannot_be_captured_is_not_captured_again(monkeypatch, profiler):
    """Remembered per implementation in the process: its later pairs pay no capture attempt; another
    implementation still gets its graph; an unnamed call (key "") is never remembered, nor a replay
    that does not give the judged bits (it may be one case's)."""
    monkeypatch.setattr(gputime, "NO_GRAPH", set())
    cuda = FakeCuda(monkeypatch)
    prepare, run = step(fail_in_capture=cuda)
    captures = []
    real = gputime.capture
    monkeypatch.setattr(gputime, "capture", lambda *a: captures.append(1) or real(*a))
    first = {"y": torch.full((3,), 2.0)}
    for _ in range(3):
        assert gputime.gpu_time(prepare, run, first, same, least=5, key="k")[1] == "profiler"
    assert len(captures) == 1 and gputime.NO_GRAPH == {"k"}
    assert gputime.gpu_time(*step(), first, same, least=5, key="other")[1] == "graph"
    gputime.gpu_time(prepare, run, first, same, least=5)
    gputime.gpu_time(prepare, run, first, same, least=5)
    assert len(captures) == 4 and gputime.NO_GRAPH == {"k"}
    other = {"y": torch.full((3,), 3.0)}                    # a replay that is not the judged bits
    assert gputime.gpu_time(*step(), other, same, least=5, key="m")[1] == "profiler"
    assert gputime.gpu_time(*step(), other, same, least=5, key="m")[1] == "profiler"
    assert len(captures) == 6 and gputime.NO_GRAPH == {"k"}


def test_no_gpu_time_leaves_the_columns_empty(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    prepare, run = step(fail_in_capture=cuda)

    def broken(*a):
        raise RuntimeError("CUPTI could not start")
    monkeypatch.setattr(gputime, "profiler_seconds", broken)
    seconds, method = gputime.gpu_time(prepare, run, {"y": torch.full((3,), 2.0)}, same, least=5)
    assert math.isnan(seconds) and method == ""


def test_a_plugin_that_leaves_another_stream_current_or_exits_leaves_no_capture_open(monkeypatch):
    """A call that switches the current stream inside the capture, or raises SystemExit there and in
    the profiler: the capture is ended on its own stream, nothing escapes, the columns stay empty."""
    cuda = FakeCuda(monkeypatch)

    def prepare():
        return SimpleNamespace(x=torch.ones(3))

    def switching(call):
        cuda.current = "another"                      # torch.cuda.set_stream, never put back
        return {"y": call.x * 2}
    gputime.gpu_time(prepare, switching, {"y": torch.full((3,), 2.0)}, same, least=5)
    assert not cuda.capturing

    def exits(call):
        raise SystemExit(3)
    monkeypatch.setattr(gputime, "profiler_seconds", lambda prepare, run, least: run(prepare()))
    cuda.current = "default"
    seconds, method = gputime.gpu_time(prepare, exits, {"y": torch.full((3,), 2.0)}, same, least=5)
    assert math.isnan(seconds) and method == "" and not cuda.capturing and cuda.current == "default"


def test_a_failing_gpu_timing_changes_no_verdict(monkeypatch):
    """The bandwidth probe running out of memory (or any failure of the GPU timing) leaves the GPU
    columns empty; the pair's repeat comparison is as it was."""
    from harness.cases.generate import generate
    from harness.impls.torch_ref import chain
    from harness.pipeline import call
    from tests.conftest import make_case
    FakeCuda(monkeypatch)
    base = generate(make_case(shape=(4, 32)))
    m = chain(32, eps=base.eps, zero_centered_gamma=False, dtype=base.weight.dtype, device="cpu")
    first = {"y": m(base.x, base.gate).detach()}

    def oom(device):
        raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
    monkeypatch.setattr(speed, "copy_bandwidth", oom)
    monkeypatch.setattr(gputime, "profiler_seconds", lambda prepare, run, least: 1e-4)
    got = call._gpu_speed(m, m.weight, base, base.x.dtype, first, 3, True, 2e-3, "cuda")
    assert got.impl_seconds == 2e-3 and math.isnan(got.gpu_seconds) and got.gpu_method == ""


def test_device_seconds_sums_the_device_events_only():
    from torch.autograd import DeviceType

    def ev(kind, us):
        return SimpleNamespace(device_type=kind, time_range=SimpleNamespace(elapsed_us=lambda: us))
    events = [ev(DeviceType.CPU, 900.0), ev(DeviceType.CUDA, 120.0), ev(DeviceType.CUDA, 60.0)]
    assert gputime.device_seconds(events) == pytest.approx(180e-6)


def test_windows_hold_enough_calls():
    assert gputime._calls_for(1e-3, 5) == 10                  # 10 ms of 1 ms calls
    assert gputime._calls_for(1.0, 5) == 5                    # never fewer than asked
    assert gputime._calls_for(1e-9, 5) == gputime.MAX_CALLS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_graph_for_torch_and_profiler_for_a_host_sync():
    """torch's gated RMSNorm captures; a call that reads a value on the host (.item()) cannot, and
    is timed by the profiler, leaving no capture open."""
    from harness.impls.torch_ref import GatedRMSNorm
    m = GatedRMSNorm(256, eps=1e-6, zero_centered_gamma=False, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)

    def prepare():
        return SimpleNamespace(x=x.clone().requires_grad_(True), g=x.clone().requires_grad_(True))

    def run(c):
        y = m(c.x, c.g)
        y.backward(torch.ones_like(y))
        return {"y": y, "dx": c.x.grad}

    def synced(c):
        float(c.x.sum().item())
        return run(c)
    first = run(prepare())
    first = {k: v.detach().clone() for k, v in first.items()}
    seconds, method = gputime.gpu_time(prepare, run, first, same, least=5)
    assert method == "graph" and 0 < seconds < 0.01
    seconds, method = gputime.gpu_time(prepare, synced, first, same, least=5)
    assert method == "profiler" and 0 < seconds < 0.01 and not torch.cuda.is_current_stream_capturing()



def test_a_call_keeps_no_graph_alive():
    """_Call.run's y is detached: a y holding its graph keeps the weight's AccumulateGrad node, bound
    to the stream the call ran on, alive into the GPU-time capture on a side stream, which then
    syncs and fails (on the H200 every capture failed so until this held)."""
    from harness.cases.generate import generate
    from harness.impls.torch_ref import chain
    from harness.pipeline.call import _Call
    from tests.conftest import make_case
    base = generate(make_case(shape=(4, 32)))
    m = chain(32, eps=base.eps, zero_centered_gamma=False, dtype=base.weight.dtype, device="cpu")
    c = _Call(m, m.weight, base)
    y = c.run()
    assert y.grad_fn is None and not y.requires_grad
    assert c.x.grad is not None and m.weight.grad is not None          # the backward ran


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_a_pairs_calls_are_timed_by_graph_replay(monkeypatch):
    """Through run_calls, as a sweep times a pair: the capture follows the timed calls and is
    trusted (it failed on every pair while a timed call's y kept its graph alive)."""
    monkeypatch.setattr(gputime, "NO_GRAPH", set())         # another test's torch capture is not this one's
    from harness.impls.registry import resolve
    from harness.pipeline.call import run_calls
    from harness.pipeline.settings import Settings
    from tests.conftest import make_case
    rec = run_calls(make_case(shape=(64, 256)), resolve("torch"), Settings("cuda", repeats=5))
    assert rec.status == "ran" and rec.speed.gpu_method == "graph" and 0 < rec.speed.gpu_seconds < 0.01
