"""Fused (Triton or torch.compile) versions of the float64 reference work: `exact_outputs_fused`
and `undecided_fast`. On CUDA, exact_outputs_fused runs the hand-written Triton kernel of
references/triton_reference.py where it fits (FUSED_BACKEND, triton_pass_fits), else the graph below
through Inductor.

The same closed forms as references.exact (sigmoid(t) and sigmoid(-t) from one shared exp, or
looked up in a float64 table of every value of a 16-bit gate dtype: by default in the dweight
column sums, FUSED_SIGMOID_TABLE), so
results agree with the eager ones to within `float64_error_bound * gauge`, which allows a few
ulps for each transcendental (Inductor may also sum the row means and the dweight column in
another order, and contract a*b+c into an FMA). Used for big tensors on CUDA (worth_fusing). Compiled once per (shape, dtypes,
device, eps, zero_centred); if compilation or the compiled call fails, a warning is issued once and
the eager implementation is used from then on for that key.

`undecided_fast` is *exactly* the mask of references.certify.undecided: it compiles that function
itself (v - b, v + b, the two exact roundings of references.formats.round_to, the comparison)
into one fused elementwise kernel that reads v and b once and writes one bool,
instead of ~20 eager passes over float64 arrays. Every step is exact (exponent bits, division by
a power of two, round-half-even, comparisons), so there is nothing for the compiler to reorder.
"""
from __future__ import annotations

import os
import warnings

import torch

from harness.references.exact import Inputs, completed_on_use, exact_outputs
from harness.references.formats import Format

# Below this many elements the eager float64 passes take milliseconds on a GPU while a compile
# (per shape, dtypes, eps) takes seconds: a sweep of many shapes uses eager, big cases fuse.
FUSED_MIN_ELEMENTS = 1 << 24

_COMPILED: dict = {}
_FAILED: set = set()
_WARNED: set = set()


def worth_fusing(t: torch.Tensor) -> bool:
    """Whether the fused (compiled) pass pays for its compile on this tensor: CUDA and big."""
    return t.is_cuda and t.numel() >= FUSED_MIN_ELEMENTS


def _warn_once(what: str, err: BaseException, instead: str = "the eager implementation") -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        warnings.warn(f"references.fast: {what} failed ({type(err).__name__}: {err}); using {instead}",
                      RuntimeWarning, stacklevel=3)


def _raise_recompile_limit(n: int = 256) -> None:
    """Each shape/dtype is its own graph (dynamic=False); don't let Dynamo's default limit of 8
    silently fall back to eager after a few shapes."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name) and getattr(cfg, name) < n:
            setattr(cfg, name, n)


# ------------------------------------------------------------------------ sigmoid lookup tables

_TABLES: dict = {}


def sigmoid_table(dtype: torch.dtype, device) -> torch.Tensor:
    """sigmoid(t) and sigmoid(-t) in float64 (references.exact.silu_parts, eagerly) for every one of
    the 65536 bit patterns of a 16-bit gate dtype, as a (65536, 2) table indexed by the gate's bits.
    Why: a 16-bit gate has only 65536 values, and the float64 exp and division per element are
    what made the column-sum kernel of the fused pass compute-bound (recomputing silu); a 1 MiB
    table read from L2 is cheaper. Same formula as the eager closed forms (torch's own sigmoid may
    differ by an ulp between its vectorised and scalar paths, so "same" means within that)."""
    key = (dtype, str(device))
    tab = _TABLES.get(key)
    if tab is None:
        u = torch.arange(1 << 16, dtype=torch.int32, device=device)     # row i: the bits i as uint16
        t = torch.where(u >= 1 << 15, u - (1 << 16), u).to(torch.int16).view(dtype).to(torch.float64)
        tab = torch.stack([torch.sigmoid(t), torch.sigmoid(-t)], dim=1).contiguous()   # as silu_parts
        _TABLES[key] = tab
    return tab


def has_sigmoid_table(gate_dtype: torch.dtype) -> bool:
    return gate_dtype in (torch.bfloat16, torch.float16)


# Where the fused (Inductor) pass reads the table: "off" (exp everywhere), "all", or "columns" (only
# in the dweight column sums). Measured on the H200 (bench/RESULTS.md, runs 9c and 10a; 8192x4096
# bf16): "off" 0.72-0.74 ms, "all" 0.75-0.77 ms — Inductor's looped row kernel loads the table in
# each of its loops (0.46 -> 0.58 ms) while the column-sum kernel, which recomputes silu, gains
# (0.24 -> 0.16 ms) — and "columns", each kernel its better half, 0.63-0.65 ms. (Tried in run 10d
# and dropped: the column sums as a graph of their own on a high-priority side stream, to overlap
# the row kernel, 0.66 ms; Inductor's coordinate-descent tuning, 0.65 ms.)
FUSED_SIGMOID_TABLE = "columns"
TABLE_MODES = ("off", "all", "columns")
# How the fused pass writes the two row sums of dx (see _outputs_body): "xhat" or "raw". Measured on
# the H200 (bench/RESULTS.md, run 11; 8192x4096 bf16, the table in the column sums): "raw" 5-6 %
# faster by wall time in three calls and even in a fourth, 2.6-3.2 % by kernel time in two; not yet
# run through a GPU sweep, so the default stays as before.
FUSED_ROW_SUMS = "xhat"
ROW_SUM_MODES = ("xhat", "raw")
# Which pass exact_outputs_fused runs on a CUDA tensor: "triton", the hand-written "regs" kernel of
# references/triton_reference.py (one pass: each row's sums, then its outputs from L1/L2, dweight
# summed in registers; sigmoid from the table of a 16-bit gate in both loops) where it fits, else
# Inductor's; or "inductor". FUSED_SIGMOID_TABLE and FUSED_ROW_SUMS are Inductor's settings: the
# Triton kernel always takes dx's row sums from the raw products (as FUSED_ROW_SUMS "raw", one loop).
# Where it fits: Triton installed; rows of TRITON_MIN_HIDDEN to TRITON_MAX_HIDDEN columns (its
# per-thread dweight accumulators grow with the row: at 4096 columns and 16 warps, 127 registers and
# no spills for sm_90a with the table of a 16-bit gate, 28 bytes of spills with the exp of an fp32
# one, bench/gpu/run12/offline-registers.txt; narrower rows would leave one program an SM with few
# warps: unmeasured); eps >= TRITON_MIN_EPS, because the raw products dy silu gam x may underflow
# where the eager form's dxhat * xhat (xhat = x r) does not: with the division of the sum, the dx
# projection c = r mean(u) (and its gauge's q) is off by at most about (2r + 2) 2^-1075, so dx =
# r (dxhat - xhat c) and its gauge by at most about r^2 |xhat| 2^-1074 <= eps^-1 sqrt(hidden) 2^-1074:
# ~3e-302 for eps 1e-20 and 4096 columns — under the 1e-300 the tests allow absolutely, far under
# any 16/32-bit output's smallest subnormal (eps 0 and x ~ 1e-20: off by 1e-284 and more, found by
# review). This covers the row sums only: an fp32 gate below about -709.8, where torch's float64
# sigmoid is 0 and the exp form's a subnormal, differs by ~1e-295 in either fused pass (as before).
# Measured on the H200 (bench/RESULTS.md, run 12; 8192x4096 bf16): 0.46-0.48 ms of kernels (0.47-0.50
# wall) against Inductor's 0.61-0.62 (0.63-0.66 wall); the same verdicts on bench/suites/big.toml
# through either.
FUSED_BACKEND = os.environ.get("HARNESS_FUSED_BACKEND", "triton")     # e.g. to rule the Triton pass out
BACKENDS = ("triton", "inductor")
TRITON_MIN_HIDDEN, TRITON_MAX_HIDDEN = 1024, 4096
TRITON_MIN_EPS = 1e-20


def triton_pass_fits(inp: Inputs) -> bool:
    """Whether exact_outputs_fused's Triton pass applies: CUDA, Triton installed, a row width it
    was measured at, eps not so small that its raw row sums could underflow visibly."""
    if not inp.x.is_cuda or not TRITON_MIN_HIDDEN <= inp.hidden <= TRITON_MAX_HIDDEN or inp.eps < TRITON_MIN_EPS:
        return False
    from harness.references import triton_reference      # imports this module: not at the top
    return triton_reference.available()


# ---------------------------------------------------------------------------------- exact outputs

def _gate_sigmoids(gate_in, t, table):
    """sigmoid(t), sigmoid(-t): from the table for a 16-bit gate, else from one shared exp and one
    division (e = exp(-|t|) <= 1, d = 1/(1+e); each is d or e*d, a few ulps as the eager ones)."""
    if table is not None:
        row = table[gate_in.view(torch.int16).to(torch.int32) & 0xFFFF]
        return row[..., 0], row[..., 1]
    e = torch.exp(-t.abs())
    d = 1 / (1 + e)
    ed = e * d
    pos = t >= 0
    return torch.where(pos, d, ed), torch.where(pos, ed, d)


def _outputs_body(x_in, gate_in, w_in, dy_in, table, eps: float, zc: bool, table_mode: str = "all",
                  columns: bool = True, row_sums: str = "xhat"):
    """references.exact.exact_outputs, written as one graph (same formulas; the two sigmoids from a
    table of the gate dtype's values, or from one shared exp; with table_mode "columns" the table
    only for the dweight column sums). row_sums "raw": the dx projection mean(dxhat xhat) and its
    gauge's mean(a |xhat|) as r mean(dn g x) and r mean(|dn g x|) — sums of the inputs' products,
    independent of r, so that Inductor takes all three row sums in one loop (as
    references/triton_reference.py does)."""
    f64 = torch.float64
    x = x_in.to(f64)
    w = w_in.to(f64)
    g = w + 1 if zc else w
    t = gate_in.to(f64)
    dy = dy_in.to(f64)
    s, one_minus_s = _gate_sigmoids(gate_in, t, table if table_mode == "all" else None)
    silu = t * s
    dn = dy * silu
    dxhat = dn * g
    r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    xhat = x * r
    if row_sums == "raw":
        u = dxhat * x
        c, q = r * u.mean(-1, keepdim=True), r * u.abs().mean(-1, keepdim=True)
    else:
        c = (dxhat * xhat).mean(-1, keepdim=True)
        q = None
    dsilu = s * (1 + t * one_minus_s)
    dsilu_abs = s * (1 + t.abs() * one_minus_s)
    n = xhat * g
    # rmsnorm_backward and its gauge
    dx = r * (dxhat - xhat * c)
    a = dn.abs() * g.abs()
    xa = xhat.abs()
    dx_g = r * (a + xa * (q if q is not None else (a * xa).mean(-1, keepdim=True)))
    y = n * silu
    dgate = dy * n * dsilu
    dgate_g = (dy * n).abs() * dsilu_abs
    # n, dn and the |.| gauges are not written: 5 full-size float64 arrays instead of 10
    if not columns:      # the dweight column sums left to another kernel: each row's rsqrt for it
        return y, dgate, dx, dgate_g, dx_g, r
    h = dn.shape[-1]
    # the column sums are their own kernel, which recomputes dn: there the table may pay
    dn_col = dy * (t * _gate_sigmoids(gate_in, t, table)[0]) if table_mode == "columns" else dn
    dweight = (dn_col * xhat).reshape(-1, h).sum(0)
    dw_g = (dn_col.abs() * xa).reshape(-1, h).sum(0)
    return y, dgate, dx, dweight, dgate_g, dx_g, dw_g


def _inductor_options() -> dict:
    """Inductor's "mix-order reduction" (a row and a column reduction in one Triton kernel, on by
    default in torch 2.10+) initialises its float64 accumulators as float32 and fails to compile
    at 8192x4096 (seen on torch 2.11+cu130): keep the dweight column sums a kernel of their own."""
    try:
        from torch._inductor import config as ic
        return {"triton.mix_order_reduction": False} if hasattr(ic.triton, "mix_order_reduction") else {}
    except Exception:
        return {}


def _key(inp: Inputs):
    return (tuple(inp.x.shape), inp.x.dtype, inp.gate.dtype, inp.weight.dtype, inp.dy.dtype,
            str(inp.x.device), float(inp.eps), bool(inp.zero_centered_gamma))


def _compiled_outputs(key, table_mode: str = "off", columns: bool = True, row_sums: str | None = None):
    row_sums = row_sums or FUSED_ROW_SUMS
    if row_sums not in ROW_SUM_MODES:
        raise ValueError(f"row_sums {row_sums!r}: one of {ROW_SUM_MODES}")
    fn = _COMPILED.get(("outputs", table_mode, columns, row_sums) + key)
    if fn is None:
        _raise_recompile_limit()
        eps, zc = key[-2], key[-1]

        def body(x, gate, w, dy, table):
            return _outputs_body(x, gate, w, dy, table, eps, zc, table_mode, columns, row_sums)

        fn = torch.compile(body, dynamic=False, fullgraph=True, options=_inductor_options())
        _COMPILED[("outputs", table_mode, columns, row_sums) + key] = fn
    return fn


def exact_outputs_fused(inp: Inputs) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """references.exact.exact_outputs in one fused pass: on CUDA the Triton kernel where it fits
    (FUSED_BACKEND), else through torch.compile (a row kernel writing the values of y, dx, dgate
    and the gauges of dx and dgate, and the dweight column sums). The rest (n, dn, the |value|
    gauges of y, n, dn) is computed eagerly on first use (exact.Derived)."""
    if inp.x.numel() == 0:
        return exact_outputs(inp)
    for name, value, allowed in (("FUSED_SIGMOID_TABLE", FUSED_SIGMOID_TABLE, TABLE_MODES),
                                 ("FUSED_ROW_SUMS", FUSED_ROW_SUMS, ROW_SUM_MODES),
                                 ("FUSED_BACKEND", FUSED_BACKEND, BACKENDS)):
        if value not in allowed:                         # a setting, not a compile failure: raise
            raise ValueError(f"references.fast.{name} {value!r}: one of {allowed}")
    key = _key(inp)
    if FUSED_BACKEND == "triton" and ("triton",) + key not in _FAILED:
        try:
            if triton_pass_fits(inp):
                from harness.references.triton_reference import exact_outputs_triton
                return exact_outputs_triton(inp, layout="regs", table=has_sigmoid_table(inp.gate.dtype),
                                            evict="evict_first")
        except Exception as err:     # a broken Triton, no compiler for this GPU, out of resources, ...:
            _FAILED.add(("triton",) + key)       # Inductor's pass for this key from now on
            _warn_once(f"the Triton reference pass for {key}", err, "Inductor's pass")
    if key not in _FAILED:
        try:
            mode = FUSED_SIGMOID_TABLE if has_sigmoid_table(inp.gate.dtype) else "off"
            table = sigmoid_table(inp.gate.dtype, inp.gate.device) if mode != "off" else None
            y, dgate, dx, dw, dgate_g, dx_g, dw_g = _compiled_outputs(key, mode)(inp.x, inp.gate, inp.weight,
                                                                                 inp.dy, table)
            return completed_on_use(inp, {"y": y, "dgate": dgate, "dx": dx, "dweight": dw},
                                    {"dgate": dgate_g, "dx": dx_g, "dweight": dw_g})
        except Exception as err:     # compiler missing, backend error, ...: eager from now on
            _FAILED.add(key)
            _warn_once("torch.compile of exact_outputs", err)
    return exact_outputs(inp)


# ---------------------------------------------------------------------------------- undecided mask

def _undecided_eager(v, b, fmt: Format):
    from harness.references.certify import undecided
    return undecided(v, b, fmt)


def undecided_fast(value64: torch.Tensor, abs_bound: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Drop-in for references.certify.undecided (same mask, bit for bit), one fused pass."""
    v = value64.to(torch.float64)
    b = abs_bound.to(torch.float64) if isinstance(abs_bound, torch.Tensor) else \
        torch.full_like(v, float(abs_bound))
    if fmt.precision >= 53 or v.numel() == 0:
        return _undecided_eager(v, b, fmt)
    if b.shape != v.shape:
        v, b = torch.broadcast_tensors(v, b)
    key = ("undecided", tuple(v.shape), str(v.device), fmt.precision, fmt.emin, fmt.max)
    if key not in _FAILED:
        try:
            fn = _COMPILED.get(key)
            if fn is None:
                _raise_recompile_limit()

                def body(v, b):               # the format is a constant of the graph
                    return _undecided_eager(v, b, fmt)

                fn = torch.compile(body, dynamic=False, fullgraph=True)
                _COMPILED[key] = fn
            return fn(v.contiguous(), b.contiguous())
        except Exception as err:
            _FAILED.add(key)
            _warn_once("torch.compile of undecided", err)
    return _undecided_eager(v, b, fmt)
