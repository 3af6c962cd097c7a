"""Accelerated passes of the float64 reference work, one entry point each: `exact_outputs` (the
closed forms' values and gauges) and `undecided_mask` (references.formats.undecided in one fused
pass). Both give what the eager code gives — the same mask bit for bit; the same values within
references.exact.float64_error_bound * gauge (a compiler may sum in another order and contract
a*b+c into an FMA) — and tests check it.

Backends, chosen by the caller (`harness run --reference-backend`), never by the environment:
  "auto"      eager below FUSED_MIN_ELEMENTS or off CUDA (a compile costs seconds per shape); on CUDA
              above it the Triton kernel where it fits (triton_regs.fits: norm first, one group, a
              silu gate), else Inductor's graph (any order, groups, either activation);
  "inductor"  Inductor's graph for the big CUDA cases, never the Triton kernel;
  "eager"     references.exact everywhere.
A compile or kernel that fails warns once for its key and falls back (Triton to Inductor to eager)."""
from __future__ import annotations

import warnings

import torch

from harness.references.exact import Inputs, exact_outputs as eager_outputs
from harness.references.formats import Format, undecided

BACKENDS = ("auto", "inductor", "eager")
FUSED_MIN_ELEMENTS = 1 << 24
_FAILED: set = set()


def _warn_once(what: str, err: BaseException, instead: str) -> None:
    if what not in _FAILED:
        _FAILED.add(what)
        warnings.warn(f"references.accel: {what} failed ({type(err).__name__}: {err}); using {instead}",
                      RuntimeWarning, stacklevel=3)


def worth_fusing(t: torch.Tensor) -> bool:
    return t.is_cuda and t.numel() >= FUSED_MIN_ELEMENTS


def pass_for(inp: Inputs, backend: str = "auto") -> str:
    """Which pass `exact_outputs` runs for these inputs: "triton", "inductor" or "eager"."""
    if backend not in BACKENDS:
        raise ValueError(f"reference backend {backend!r}: one of {', '.join(BACKENDS)}")
    if backend == "eager" or not worth_fusing(inp.x):
        return "eager"
    from harness.references.accel import triton_regs
    if backend == "auto" and triton_regs.fits(inp) and ("triton",) + _key(inp) not in _FAILED:
        return "triton"
    return "inductor" if ("inductor",) + _key(inp) not in _FAILED else "eager"


def _key(inp: Inputs) -> tuple:
    from harness.references.accel.inductor import key
    return key(inp)


def exact_outputs(inp: Inputs, backend: str = "auto") -> tuple[dict, dict]:
    """references.exact.exact_outputs, through the pass `pass_for` picks."""
    which = pass_for(inp, backend)
    if which == "triton":
        try:
            from harness.references.accel import triton_regs
            values, gauges = triton_regs.exact_outputs(inp)
            return values, {"y": values["y"].abs(), **gauges}
        except Exception as err:          # a broken Triton, no compiler for this GPU, out of resources
            _warn_once(f"the Triton reference pass for {_key(inp)}", err, "Inductor's pass")
            _FAILED.add(("triton",) + _key(inp))
            which = pass_for(inp, backend)
    if which == "inductor":
        try:
            from harness.references.accel.inductor import exact_outputs_compiled
            return exact_outputs_compiled(inp)
        except Exception as err:
            _warn_once(f"Inductor's reference pass for {_key(inp)}", err, "the eager closed forms")
            _FAILED.add(("inductor",) + _key(inp))
    return eager_outputs(inp)


_MASKS: dict = {}


def undecided_mask(value64: torch.Tensor, abs_bound: torch.Tensor, fmt: Format) -> torch.Tensor:
    """references.formats.undecided, compiled into one elementwise kernel for big CUDA tensors (each
    step is one IEEE operation — exponent bits, adding and subtracting a power of two, in that order,
    never reassociated — so the mask is the same bit for bit)."""
    v = value64.to(torch.float64)
    b = abs_bound.to(torch.float64) if isinstance(abs_bound, torch.Tensor) else torch.full_like(v, float(abs_bound))
    if not worth_fusing(v) or fmt.precision >= 53:
        return undecided(v, b, fmt)
    v, b = torch.broadcast_tensors(v, b)
    k = ("undecided", tuple(v.shape), str(v.device), fmt.name)
    if k not in _FAILED:
        try:
            fn = _MASKS.get(k)
            if fn is None:
                from harness.references.accel.inductor import raise_recompile_limit
                raise_recompile_limit()
                fn = _MASKS[k] = torch.compile(lambda v, b: undecided(v, b, fmt), dynamic=False, fullgraph=True)
            return fn(v.contiguous(), b.contiguous())
        except Exception as err:
            _warn_once("torch.compile of undecided", err, "the eager mask")
            _FAILED.add(k)
    return undecided(v, b, fmt)
