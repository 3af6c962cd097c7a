"""The implementation's side of a pair: its calls, on inputs of its own, and what a caller got.

Every call gets its own copies of x, gate and dy and has the case's weight written into its
module; the pristine inputs are never handed out. What is judged is the first call's output, cloned
into plain tensors the moment the call returns (y before the backward runs, the gradients right
after it), before any other call: a kernel that writes a persistent buffer, is right only on its
first call, or returns a Tensor subclass cannot substitute later data. Then the same inputs again
(fresh copies): first the inference path — the forward under torch.inference_mode(), whose y is
`y_infer` (cloned as the first call's are, judged against y's references), and under
torch.no_grad(), which must give y_infer's bits —, then a second call and the timed calls, whose last
result is compared too: any output that differs bit for bit is reported per element. A forward-only
implementation (`backward = False`) is called on inputs that do not require grad, and every call
of it is the forward alone. Finally the first call's input copies are
compared with the pristine inputs: an implementation that wrote into one is named (reusing dy's
buffer for dx, as Liger-Kernel's in-place RMSNorm does, is legitimate: it only ever wrote its own
copy).

Whatever the implementation raises becomes data: `Unsupported` a skip, anything else (SystemExit
too) an error. What cannot be caught in the process — os._exit, a segfault, a hang — is the
worker's to survive (harness.worker). This side never computes a reference or a verdict."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import torch

from harness.analysis.compare import bits
from harness.analysis.result import Finding, Repeat, Speed
from harness.cases.case import Case
from harness.cases.generate import act_format, generate
from harness.impls.base import Implementation
from harness.pipeline import fpenv, gpushare
from harness.pipeline.gpushare import TIMING_WAIT, alone
from harness.pipeline.settings import Settings
from harness.pipeline.speed import gpu_speed
from harness.references.errors import Unsupported, out_of_memory, said
from harness.references.exact import OUTPUTS, Inputs
from harness.references.metrics import unravel
from harness.reports.schema import INFERENCE_OUTPUT

# Untimed warm calls before each timing on a GPU (Triton's do_bench warms up for 25 ms too).
WARMUP_SECONDS = 0.025
INPUTS = ("x", "gate", "weight", "dy")


@dataclass
class CallRecord:
    """What the implementation's side hands the judge: plain data and plain tensors."""
    status: str = "ran"                    # ran, skip (declined), error (raised, out of memory)
    text: str = ""                         # skip / error: why, in the implementation side's words
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)    # the first call's, plain clones
    problems: dict[str, Finding] = field(default_factory=dict)        # contract findings, per output
    repeats: dict[str, Repeat] = field(default_factory=dict)          # the later calls' differences
    inputs_modified: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0                   # factory + first call, synchronised
    timing_seconds: float = 0.0            # the later calls
    speed: Speed | None = None


def short(e: BaseException) -> str:
    msg = said(e)
    return f"{type(e).__name__}: {msg.splitlines()[0] if msg else ''}"[:300]


def _failure(e: BaseException, where: str) -> CallRecord:
    if isinstance(e, KeyboardInterrupt):
        raise e
    if isinstance(e, Unsupported):
        return CallRecord("skip", said(e) or "not supported")
    if out_of_memory(e):               # a case too big for the machine: an error row, as any other
        return CallRecord("error", f"out of memory in the {where}: {short(e)}")
    return CallRecord("error", f"{where} raised {short(e)}")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class BadModule(Exception):
    """The factory's module breaks the contract (no `weight`, or a wrong shape): an error."""


def make_module(impl: Implementation, inp: Inputs, device: str, kwargs: dict):
    module = impl.factory(inp.hidden, eps=inp.eps, zero_centered_gamma=inp.zero_centered_gamma,
                          dtype=inp.weight.dtype, device=device, **kwargs)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise BadModule("module has no `weight` parameter")
    if tuple(weight.shape) != (inp.hidden,):
        raise BadModule(f"weight shape {tuple(weight.shape)}, expected ({inp.hidden},)")
    return module, weight


def _dtype(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def plain(name: str, t, shape, dtype: torch.dtype) -> tuple[torch.Tensor | None, Finding | None]:
    """A clone of `t` as a plain tensor, or the contract finding that says why not. A Tensor
    subclass is refused before any of its methods runs: its `.dtype`, `.to()` or `.clone()` are its
    own code and may report other data than it holds."""
    if t is None:       # a gradient autograd did not reach, or a forward that returned nothing
        return None, Finding("contract", text="gradient missing (None)" if name.startswith("d") else
                                              f"{name} is None, expected a tensor")
    if not isinstance(t, torch.Tensor):
        return None, Finding("contract", text=f"{name} is {type(t).__name__}, expected a tensor")
    if type(t) is not torch.Tensor:
        return None, Finding("contract", text=f"{name} is {type(t).__name__}, a torch.Tensor subclass; expected a "
                                              f"plain torch.Tensor (its own methods could report other data)")
    if tuple(t.shape) != tuple(shape):
        return None, Finding("contract", text=f"{name} shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.dtype != dtype:
        return None, Finding("contract", text=f"{name} dtype {_dtype(t.dtype)}, expected {_dtype(dtype)}")
    if t.layout != torch.strided:                 # sparse, mkldnn...: what a dense output reads as is not its data
        return None, Finding("contract", text=f"{name} layout {str(t.layout).replace('torch.', '')}, expected a "
                                              f"dense (strided) tensor")
    return t.detach().clone(), None


class _Call:
    """One forward (and backward, where `grad`) on fresh copies of the pristine inputs; without
    `grad`, x and the gate do not require grad (a forward-only implementation, the inference path)."""

    def __init__(self, module, weight, base: Inputs, grad: bool = True):
        with torch.no_grad():
            weight.copy_(base.weight.to(device=weight.device, dtype=weight.dtype))
        weight.grad = None
        self.module, self.weight = module, weight
        self.x = base.x.detach().clone().requires_grad_(grad)
        self.gate = base.gate.detach().clone().requires_grad_(grad)
        self.dy = base.dy.detach().clone()
        self.grad = grad

    def run(self):
        """The forward, and the backward where this call has one: y, detached. A y that kept its
        graph would keep the weight's AccumulateGrad node alive, bound to the stream the call ran
        on: a CUDA-graph capture on a side stream after it then syncs and fails (torch 2.11, the
        H200: every capture in the harness did, and fell back to the profiler)."""
        y = self.forward()
        if self.grad:
            self.backward(y)
        return y.detach() if isinstance(y, torch.Tensor) else y

    def forward(self):
        return self.module(self.x, self.gate)

    def backward(self, y) -> None:
        # dy as it is: autograd casts it to y's real dtype where they differ (a contract failure),
        # which a Tensor subclass's own `.dtype` cannot misstate
        y.backward(self.dy)

    def grads(self) -> dict:
        """The backward's outputs (none for a call without one)."""
        return {"dx": self.x.grad, "dgate": self.gate.grad, "dweight": self.weight.grad} if self.grad else {}


def expected(inp: Inputs, act_dtype: torch.dtype) -> dict[str, tuple]:
    return {"y": (inp.x.shape, act_dtype), "dx": (inp.x.shape, inp.x.dtype),
            "dgate": (inp.gate.shape, inp.gate.dtype), "dweight": (inp.weight.shape, inp.weight.dtype)}


def first_call(module, weight, base: Inputs, act_dtype, device: str, backward: bool = True):
    """The judged call: (outputs, problems, the call's own input copies). Forward-only
    (`backward` False): y alone, from inputs that do not require grad."""
    want = expected(base, act_dtype)
    call = _Call(module, weight, base, grad=backward)
    y = call.forward()
    y_out, y_bad = plain("y", y, *want["y"])           # at once: before the backward can touch it
    outputs, problems = {}, {}
    if not backward:
        return ({}, {"y": y_bad}, call) if y_bad is not None else ({"y": y_out}, {}, call)
    if y_bad is not None and not (isinstance(y, torch.Tensor) and tuple(y.shape) == tuple(base.x.shape)):
        # without a usable y there is no backward either: every output fails
        return {}, {k: y_bad for k in OUTPUTS}, call
    call.backward(y)
    _sync(device)
    for k, t in [("y", y_out), *call.grads().items()]:
        got, bad = (y_out, y_bad) if k == "y" else plain(k, t, *want[k])
        if bad is not None:
            problems[k] = bad
        else:
            outputs[k] = got
    return outputs, problems, call


def differing(first: dict[str, torch.Tensor], later: dict) -> dict[str, Repeat]:
    """Per output of the first call, the elements whose bits a later call changed (NaN payloads
    included), with the first of them."""
    out = {}
    for k, t in first.items():
        u = later.get(k)
        if type(u) is not torch.Tensor or u.shape != t.shape or u.dtype != t.dtype or u.device != t.device:
            out[k] = Repeat(t.numel(), unravel(0, t.shape) if t.numel() else (),
                            float(t.reshape(-1)[0]) if t.numel() else math.nan)
            continue
        diff = (bits(t) != bits(u.detach())).reshape(-1)
        n = int(diff.sum())
        if n:
            k0 = int(diff.nonzero()[0])
            out[k] = Repeat(n, unravel(k0, t.shape), float(t.reshape(-1)[k0]), float(u.detach().reshape(-1)[k0]))
        else:
            out[k] = Repeat()
    return out


def _worse(a: dict[str, Repeat], b: dict[str, Repeat]) -> dict[str, Repeat]:
    return {k: (b[k] if b.get(k, Repeat()).count > a[k].count else a[k]) for k in a}


def inference_calls(module, weight, base: Inputs, act_dtype, device: str) -> tuple[dict, dict, dict]:
    """The inference path: the forward under torch.inference_mode() on fresh copies — its y is
    `y_infer`, cloned into a plain tensor as the call returns — then under torch.no_grad() on fresh
    copies, whose y must have y_infer's bits. (outputs, problems, repeats), each keyed y_infer. A
    call that raises is an `error` finding of y_infer (the training path ran the case)."""
    shape, dtype = expected(base, act_dtype)["y"]
    try:
        call = _Call(module, weight, base, grad=False)
        with torch.inference_mode():
            y = call.forward()
        # named y in the words, so that a finding known for y (its dtype) is known here too
        got, bad = plain("y", y, shape, dtype)
        if bad is not None:
            return {}, {INFERENCE_OUTPUT: replace(bad, text=f"under torch.inference_mode(): {bad.text}")}, {}
        call = _Call(module, weight, base, grad=False)
        with torch.no_grad():
            y = call.forward()
        _sync(device)
        repeats = differing({INFERENCE_OUTPUT: got}, {INFERENCE_OUTPUT: y})
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return {}, {INFERENCE_OUTPUT: Finding("error", text=f"the inference path raised {short(e)}")}, {}
    return {INFERENCE_OUTPUT: got}, {}, repeats


def later_calls(module, weight, base: Inputs, act_dtype, first: dict, device: str, repeats: int,
                backward: bool = True, name: str = "") -> tuple[dict, Speed | None]:
    """A second call (compared with the first), then on a GPU WARMUP_SECONDS of untimed ones, then
    `repeats` timed calls — each on fresh copies, prepared before the clock starts — of which the
    last is compared too; forward and backward, or the forward alone where `backward` is False.
    Their median wall time (host-inclusive: Python, launches, the final sync) and, on a GPU, the
    call's GPU time (harness.pipeline.speed), measured after everything compared, the worker's
    judge kept off the GPU meanwhile (harness.pipeline.gpushare; where it could not be, no GPU
    time; the wait for it is not counted in the implementation's timed-call seconds). (per-output
    Repeat, Speed or None). `act_dtype`: y's (the bytes moved count it); `name`: the
    implementation's, under which gputime remembers a call that cannot be captured."""
    call = _Call(module, weight, base, grad=backward)
    y = call.run()
    _sync(device)
    got = differing(first, {"y": y, **call.grads()})
    if not repeats:
        return got, None
    cuda = device.startswith("cuda")
    with alone(cuda, TIMING_WAIT) as held:        # the worker's judge off the GPU meanwhile
        t0 = time.perf_counter()
        while cuda and time.perf_counter() - t0 < WARMUP_SECONDS:
            _Call(module, weight, base, grad=backward).run()
            _sync(device)
        times = []
        for _ in range(repeats):
            c = _Call(module, weight, base, grad=backward)
            _sync(device)
            t1 = time.perf_counter()
            y = c.run()
            _sync(device)
            times.append(time.perf_counter() - t1)
        got = _worse(got, differing(first, {"y": y, **c.grads()}))
        times.sort()
        wall = times[len(times) // 2]
        if not cuda or not held:                  # beside the judge's GPU work: no GPU figure
            return got, Speed(wall)
        return got, _gpu_speed(module, weight, base, act_dtype, first, repeats, backward, wall, device, name)


def _gpu_speed(module, weight, base: Inputs, act_dtype, first: dict, repeats: int, backward: bool,
               wall: float, device: str, name: str = "") -> Speed:
    """The call's GPU time beside its wall time (harness.pipeline.speed), on fresh calls."""
    def run(c: _Call) -> dict:
        return {"y": c.run(), **c.grads()}
    return gpu_speed(lambda: _Call(module, weight, base, grad=backward), run, first,
                     lambda a, b: not any(r.count for r in differing(a, b).values()), repeats, wall,
                     lambda: bytes_moved(base, act_dtype, backward), device, name)


def modified(call: _Call, weight, base: Inputs) -> tuple[str, ...]:
    """The inputs whose copy the first call changed (its module's weight included)."""
    def changed(a, b) -> bool:
        a = a.detach()
        b = b.to(device=a.device, dtype=a.dtype)
        return a.shape != b.shape or bool((bits(a) != bits(b)).any())
    mine = {"x": call.x, "gate": call.gate, "weight": weight, "dy": call.dy}
    return tuple(k for k in INPUTS if changed(mine[k], getattr(base, k)))


_LAST_CASE: dict[tuple, Inputs] = {}


def case_inputs(case: Case, act_follows: str, device: str) -> Inputs:
    """The case's inputs on `device`, each pair's own tensors. Every implementation of a case runs
    before the next case (harness.runner), so the last case's CPU inputs are kept and copied for
    the next implementation rather than drawn again (an 8 M-element case's generation costs seconds
    on one core, and was paid once per implementation); the copy is what the pair gets, the kept
    tensors are never handed out."""
    key = (case.case_id, act_follows)
    if key not in _LAST_CASE:
        _LAST_CASE.clear()
        _LAST_CASE[key] = generate(case, act_follows, device)
    return _LAST_CASE[key].to(device, copy=True)


def run_calls(case: Case, impl: Implementation, s: Settings, cannot_run: str = "") -> CallRecord:
    """Every call of one pair on this process's device; never raises for what the implementation
    does (a BaseException from its `supports` or factory or calls is an error record). `cannot_run`:
    why this process cannot call it (harness.pipeline.cudafork): an error record for every case its
    declared variants take, and none of its code runs (not even `supports`, which may probe CUDA)."""
    notes = []
    if fpenv.flushes_subnormals():                 # left on by an earlier pair of this process
        notes.append(f"found {fpenv.WHAT} on before the pair; turned off")
        fpenv.restore()
    try:
        why = (replace(impl, supports=None) if cannot_run else impl).unsupported(case)
    except BaseException as e:
        return _failure(e, "its supports(case)")
    if why is not None:
        return CallRecord("skip", why)
    if cannot_run:
        return CallRecord("error", cannot_run)
    act = act_format(case, impl.act_follows)
    try:
        base = case_inputs(case, impl.act_follows, s.device)      # pristine: never handed out
    except Exception as e:
        return _failure(e, "case's inputs")
    t0 = time.perf_counter()
    try:
        module, weight = make_module(impl, base, s.device, impl.case_kwargs(case))
    except BadModule as e:
        return CallRecord("error", str(e))
    except BaseException as e:
        return _failure(e, "factory")
    try:
        outputs, problems, call = first_call(module, weight, base, act.dtype, s.device, impl.backward)
    except BaseException as e:
        return _failure(e, "forward" if not impl.backward else "forward/backward")
    rec = CallRecord("ran", "", outputs, problems, seconds=time.perf_counter() - t0)
    t1, w1 = time.perf_counter(), gpushare.waited()
    if not outputs:                                # no usable y: the inference path's is not judged either
        rec.problems = {**problems, INFERENCE_OUTPUT: problems["y"]}
    else:
        rec.inputs_modified = modified(call, weight, base)
        got, bad, infer_repeats = inference_calls(module, weight, base, act.dtype, s.device)
        rec.outputs, rec.problems = {**outputs, **got}, {**problems, **bad}
        try:
            rec.repeats, rec.speed = later_calls(module, weight, base, act.dtype, outputs, s.device,
                                                 s.timed_calls, impl.backward, impl.name)
        except BaseException as e:                # a later call that fails: not repeatable
            if isinstance(e, KeyboardInterrupt):
                raise
            rec.repeats = {k: Repeat(error=short(e)) for k in outputs}
        rec.repeats = {**rec.repeats, **infer_repeats}
    rec.timing_seconds = time.perf_counter() - t1 - (gpushare.waited() - w1)     # the judge's turn is not its cost
    if fpenv.flushes_subnormals():
        notes.append(f"left {fpenv.WHAT} on; turned off after its pair")
        fpenv.restore()
    rec.notes = tuple(notes)
    return rec


def bytes_moved(inp: Inputs, act_dtype: torch.dtype, backward: bool = True) -> int:
    """What a fused forward + backward must read and write at least: x, gate, the weight and dy in,
    y, dx, dgate and dweight out, each once and in its own dtype (`expected`'s: y in the activation
    dtype `act_dtype`, which is the weight's for act_follows="weight", and each gradient in its
    input's); a forward alone: x, gate and the weight in, y out."""
    want = expected(inp, act_dtype)
    read, written = (INPUTS, OUTPUTS) if backward else (("x", "gate", "weight"), ("y",))
    return (sum(getattr(inp, k).numel() * getattr(inp, k).element_size() for k in read)
            + sum(math.prod(want[k][0]) * want[k][1].itemsize for k in written))
