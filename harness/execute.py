"""Run one implementation on one case's inputs: forward and backward on a device, then validate what
came back (shapes, dtypes, gradients present) before any analysis sees it.

Whatever the implementation raises becomes data: `Unsupported` a skip, anything else (SystemExit
too: a plug-in's sys.exit must not end the sweep) an error naming it. What cannot be caught in the
process — os._exit, a segfault, a hang — is the worker's to survive (harness.worker)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from harness.impls.base import Implementation
from harness.references.errors import Unsupported
from harness.references.exact import OUTPUTS, Inputs


@dataclass
class Outcome:
    outputs: dict[str, torch.Tensor]      # as the implementation returned them (its device, its dtypes)
    problems: dict[str, str]              # output -> what was wrong (a `fail` row)
    error: str | None = None              # the implementation raised / ran out of memory: `error` rows
    skip: str | None = None               # it declined the case (Unsupported): `skip` rows
    seconds: float = 0.0                  # factory + forward + backward, synchronised
    module: tuple | None = None           # (module, weight): to run it again (timing, determinism)


def expected_dtypes(inp: Inputs, act_dtype: torch.dtype) -> dict[str, torch.dtype]:
    return {"y": act_dtype, "dx": inp.x.dtype, "dgate": inp.gate.dtype, "dweight": inp.weight.dtype}


def short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"[:300]


def _failure(e: BaseException, where: str) -> Outcome:
    if isinstance(e, KeyboardInterrupt):
        raise e
    if isinstance(e, Unsupported):
        return Outcome({}, {}, skip=str(e) or "not supported")
    if isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError)):
        return Outcome({}, {}, f"out of memory in the {where}: {short(e)}")
    return Outcome({}, {}, f"{where} raised {short(e)}")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# Untimed warm calls before each timing on a GPU (Triton's do_bench warms up for 25 ms too).
WARMUP_SECONDS = 0.025


class BadModule(Exception):
    """The factory's module breaks the contract (no `weight`, or a wrong shape): an error row."""


def make_module(impl: Implementation, inp: Inputs, device: str, kwargs: dict):
    module = impl.factory(inp.hidden, eps=inp.eps, zero_centered_gamma=inp.zero_centered_gamma,
                          dtype=inp.weight.dtype, device=device, **kwargs)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise BadModule("module has no `weight` parameter")
    if tuple(weight.shape) != (inp.hidden,):
        raise BadModule(f"weight shape {tuple(weight.shape)}, expected ({inp.hidden},)")
    return module, weight


def forward_backward(module, weight, inp: Inputs, device: str):
    """y and the three gradients, on fresh leaves (`.to(device)` on the same device returns the shared
    input itself, and gradients would accumulate across implementations)."""
    with torch.no_grad():
        weight.copy_(inp.weight.to(device=weight.device, dtype=weight.dtype))
    weight.grad = None
    x = inp.x.detach().to(device).clone().requires_grad_(True)
    gate = inp.gate.detach().to(device).clone().requires_grad_(True)
    y = module(x, gate)
    if not isinstance(y, torch.Tensor):
        return y, None
    if tuple(y.shape) != tuple(inp.x.shape):
        return y, None
    y.backward(inp.dy.to(device=y.device, dtype=y.dtype))
    _sync(device)
    return y, {"y": y.detach(), "dx": x.grad, "dgate": gate.grad, "dweight": weight.grad}


def run_impl(impl: Implementation, inp: Inputs, act_dtype: torch.dtype, device: str, kwargs: dict | None = None,
             module=None) -> Outcome:
    """One forward and backward; `module` (factory output, with its weight) to reuse an instance."""
    t0 = time.perf_counter()
    if module is None:
        try:
            module = make_module(impl, inp, device, kwargs or {})
        except BadModule as e:
            return Outcome({}, {}, str(e))
        except BaseException as e:
            return _failure(e, "factory")
    try:
        y, got = forward_backward(*module, inp, device)
    except BaseException as e:
        return _failure(e, "forward/backward")
    seconds = time.perf_counter() - t0
    if got is None:           # without a usable y there is no backward either: every output fails
        why = (f"y is {type(y).__name__}, expected a tensor" if not isinstance(y, torch.Tensor)
               else f"y shape {tuple(y.shape)}, expected {tuple(inp.x.shape)}")
        return Outcome({}, {k: why for k in OUTPUTS}, seconds=seconds)
    want_dtype = expected_dtypes(inp, act_dtype)
    want_shape = {"y": inp.x.shape, "dx": inp.x.shape, "dgate": inp.gate.shape, "dweight": inp.weight.shape}
    problems, outputs = {}, {}
    for k, t in got.items():
        if t is None:
            problems[k] = "gradient missing (None)"
        elif tuple(t.shape) != tuple(want_shape[k]):
            problems[k] = f"{k} shape {tuple(t.shape)}, expected {tuple(want_shape[k])}"
        elif t.dtype != want_dtype[k]:
            problems[k] = (f"{k} dtype {str(t.dtype).replace('torch.', '')}, "
                           f"expected {str(want_dtype[k]).replace('torch.', '')}")
        else:
            outputs[k] = t.detach()
    return Outcome(outputs, problems, seconds=seconds, module=module)


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, int]:
    """Per output, the elements whose bits differ between two runs (NaN payloads included)."""
    out = {}
    for k, t in a.items():
        u = b.get(k)
        if u is None or u.shape != t.shape or u.dtype != t.dtype:
            out[k] = t.numel()
            continue
        view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()]
        out[k] = int((t.contiguous().view(view) != u.contiguous().view(view)).sum())
    return out


def time_calls(module, inp: Inputs, device: str, repeats: int) -> float:
    """Median seconds of one forward + backward (warm): `module(x, gate)` and `y.backward(dy)` alone,
    the fresh leaves and the weight prepared before the clock starts (as a plain timing of the call
    would); on CUDA from CUDA events around each call, elsewhere the wall clock. Untimed calls come
    first: one on the CPU, WARMUP_SECONDS of them on a GPU."""
    module, weight = module
    with torch.no_grad():
        weight.copy_(inp.weight.to(device=weight.device, dtype=weight.dtype))
    x0, gate0, dy = (t.detach().to(device) for t in (inp.x, inp.gate, inp.dy))
    cuda = device.startswith("cuda")

    def leaves():
        weight.grad = None
        return x0.clone().requires_grad_(True), gate0.clone().requires_grad_(True)

    t0 = time.perf_counter()
    while True:                                    # at least one untimed call; on a GPU for WARMUP_SECONDS
        y = module(*leaves())
        dy = dy.to(y.dtype)                        # as forward_backward does: no cast inside the clock
        y.backward(dy)
        _sync(device)
        if not cuda or time.perf_counter() - t0 >= WARMUP_SECONDS:
            break
    times = []
    for _ in range(repeats):
        x, gate = leaves()
        _sync(device)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        module(x, gate).backward(dy)
        if cuda:
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]
