"""Exhaustive check of SiLUGate alone over every finite (x, gate) pair of bf16 / fp16.

The implementation under test computes, for one upstream gradient value dy (x plays n's role):
    y     = x * silu(gate)          rounded to the dtype
    dn    = dy * silu(gate)         (the gradient to x)
    dgate = dy * x * silu'(gate)
and is compared with the exact values (float64 closed forms, decided by mpmath where float64
cannot tell the correctly rounded result).

Layout and cost. The pair grid is tiled: the gates of the range are split by regime (normal /
extreme = gate < -87, where float32 silu becomes subnormal or flushes to -0), each regime's gates in
blocks of at most `chunk` values, and for each gate block the x values in blocks so that one tile
holds about `chunk` pairs. Everything that depends on the gate alone (float32 silu, the float64
silu, silu', gauge) is computed once per gate block and broadcast. dn does not depend on x at all:
it is computed once per gate (the same elementwise kernel the autograd path runs, on the same gate
values) and its counts are weighted by the number of x values; tests check that the per-pair
autograd x.grad equals it.

Per tile the work is elementwise (float64 on the device) plus small reductions: histogram
(bucketize + bincount), top-k worst pairs, max / sum, counts of not-correctly-rounded elements. The
correct-rounding test needs the golden value: it is float64's rounding, except where the float64
value is within its error bound of a rounding boundary. A cheap conservative filter picks those
candidates, references.certify.undecided narrows them exactly, and mpmath (50 digits) decides them
(at most MP_CAP per tile; any beyond are counted as uncertified).

Modules: enumerate (bit-pattern ranges, regimes, gate blocks and their tables, tiling), impls (the
implementations under test), metrics (budgets, `elementwise`), accumulate (Acc, Result), certify
(closed-form and mpmath golden values), fused (the default per-tile pass), reference_path (the
original path, kept for exact comparison), run (run_exhaustive), results (rows, CSVs, summary),
command (exhaustive_command).
"""
from __future__ import annotations

from harness.exhaustive.accumulate import Acc
from harness.exhaustive.certify import closed_form_golden, near_exact_golden
from harness.exhaustive.command import exhaustive_command
from harness.exhaustive.enumerate import bits_of, finite_values, parse_range
from harness.exhaustive.impls import torch_autograd, torch_fast
from harness.exhaustive.metrics import EDGES, budget_for, elementwise
from harness.exhaustive.reference_path import analyse
from harness.exhaustive.results import rows, summary
from harness.exhaustive.run import run_exhaustive

__all__ = ["Acc", "EDGES", "analyse", "bits_of", "budget_for", "closed_form_golden", "elementwise",
           "exhaustive_command", "finite_values", "near_exact_golden", "parse_range", "rows", "run_exhaustive",
           "summary", "torch_autograd", "torch_fast"]
