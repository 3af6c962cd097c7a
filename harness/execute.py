"""Run one implementation on one case's inputs: forward and backward on a device, then validate
what came back (shapes, dtypes, gradients present) before any analysis sees it."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.impls.base import Implementation
from harness.references.exact import OUTPUTS, Inputs

EXPECTED_DTYPE_OF = {"y": "act", "dx": "x", "dgate": "gate", "dweight": "weight"}


@dataclass
class Outcome:
    outputs: dict[str, torch.Tensor]      # as the implementation returned them (its device, its dtypes)
    problems: dict[str, str]              # output -> what was wrong (a `fail` row)
    error: str | None = None              # the implementation raised / ran out of memory


def expected_dtypes(inp: Inputs, act_dtype: torch.dtype) -> dict[str, torch.dtype]:
    return {"y": act_dtype, "dx": inp.x.dtype, "dgate": inp.gate.dtype, "dweight": inp.weight.dtype}


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"[:300]


def run_impl(impl: Implementation, inp: Inputs, act_dtype: torch.dtype, device: str) -> Outcome:
    try:
        module = impl.factory(inp.hidden, eps=inp.eps, zero_centered_gamma=inp.zero_centered_gamma,
                              dtype=inp.weight.dtype, device=device)
    except Exception as e:
        return Outcome({}, {}, f"factory raised {_short(e)}")
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        return Outcome({}, {}, "module has no `weight` parameter")
    if tuple(weight.shape) != (inp.hidden,):
        return Outcome({}, {}, f"weight shape {tuple(weight.shape)}, expected ({inp.hidden},)")
    try:
        with torch.no_grad():
            weight.copy_(inp.weight.to(device=weight.device, dtype=weight.dtype))
        weight.grad = None
        # Fresh leaves every run: `.to(device)` on the same device returns the shared input
        # itself, and gradients would accumulate across implementations.
        x = inp.x.detach().to(device).clone().requires_grad_(True)
        gate = inp.gate.detach().to(device).clone().requires_grad_(True)
        y = module(x, gate)
        # Without a usable y there is no backward either: every output fails, naming why.
        if not isinstance(y, torch.Tensor):
            return Outcome({}, {k: f"y is {type(y).__name__}, expected a tensor" for k in OUTPUTS})
        if tuple(y.shape) != tuple(inp.x.shape):
            return Outcome({}, {k: f"y shape {tuple(y.shape)}, expected {tuple(inp.x.shape)}" for k in OUTPUTS})
        y.backward(inp.dy.to(device=y.device, dtype=y.dtype))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as e:
        return Outcome({}, {}, f"out of memory: {_short(e)}")
    except Exception as e:
        return Outcome({}, {}, f"raised {_short(e)}")
    got = {"y": y.detach(), "dx": x.grad, "dgate": gate.grad, "dweight": weight.grad}
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
    return Outcome(outputs, problems)
