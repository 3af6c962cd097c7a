"""The float64 reference compiled by Inductor: references.exact.exact_outputs itself (the closed
forms over Gauged float64), one graph per (shape, dtypes, device, op) — for big cases on a GPU
where the Triton kernel does not apply (other widths, groups, gate first, a sigmoid gate). It handles
both gate activations by construction: Op.activation selects the closed forms it compiles."""
from __future__ import annotations

import torch

from harness.references.exact import Inputs, exact_outputs

_COMPILED: dict = {}


def raise_recompile_limit(n: int = 256) -> None:
    """Each shape/dtype is its own graph (dynamic=False); don't let Dynamo's default limit of 8
    silently fall back to eager after a few shapes."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name) and getattr(cfg, name) < n:
            setattr(cfg, name, n)


def inductor_options() -> dict:
    """Inductor's "mix-order reduction" (a row and a column reduction in one Triton kernel, torch
    2.10+) initialises its float64 accumulators as float32 and fails to compile at 8192x4096 (seen on
    torch 2.11+cu130): keep the dweight column sums a kernel of their own."""
    try:
        from torch._inductor import config as ic
        return {"triton.mix_order_reduction": False} if hasattr(ic.triton, "mix_order_reduction") else {}
    except Exception:
        return {}


def key(inp: Inputs) -> tuple:
    return (tuple(inp.x.shape), inp.x.dtype, inp.gate.dtype, inp.weight.dtype, inp.dy.dtype,
            str(inp.x.device), inp.op)


def exact_outputs_compiled(inp: Inputs) -> tuple[dict, dict]:
    fn = _COMPILED.get(key(inp))
    if fn is None:
        raise_recompile_limit()
        op = inp.op

        def body(x, gate, w, dy):
            return exact_outputs(Inputs(x, gate, w, dy, op.eps, op.zero_centered_gamma, op.group_size,
                                        op.norm_before_gate, op.activation))

        fn = _COMPILED[key(inp)] = torch.compile(body, dynamic=False, fullgraph=True, options=inductor_options())
    return fn(inp.x, inp.gate, inp.weight, inp.dy)
