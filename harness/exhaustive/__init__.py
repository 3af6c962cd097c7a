"""Exhaustive check of SiLUGate alone over every finite (x, gate) pair of bf16 / fp16.

The implementation under test computes, for one upstream gradient value dy (x plays n's role):
    y     = x * silu(gate)          rounded to the dtype
    dn    = dy * silu(gate)         (the gradient to x)
    dgate = dy * x * silu'(gate)
and is compared with the exact values: references.closed_forms in Gauged float64 (per-gate tables
of silu and silu' times exact per-x factors), decided by closed forms or mpmath (the same closed
forms, references.mp) where float64 cannot tell the correctly rounded result.

Layout. The gate range is split into aligned gate blocks (the unit of progress: --resume skips
finished ones), each block's gates by regime (normal / extreme = gate < -87, where float32 silu
becomes subnormal or flushes to -0; the extreme regime is reported, not gated), and each regime's
pairs into x tiles of about `chunk` pairs (enumerate.default_chunk: 64M on CUDA). Per tile one
pass (stats: a Triton kernel on CUDA, eager torch on the CPU, the same per-element definition
metrics.element_errors: the registered metrics of references/metrics, as harness.analysis.compare
computes them) reduces each output to histograms, counts, sums and maxima; the host then certifies the
candidates and updates the worst pairs.

Modules: enumerate (ranges, regimes, gate blocks and tables, tiles, default chunk), impls (the
implementations under test), metrics (budgets, element_errors), triton_pass (the kernel), stats
(tile passes, folding, worst pairs), certify (golden values), accumulate (Acc, Result), progress
(the resume file), run (run_exhaustive), results (rows, CSVs, summary), command (the CLI).
"""
from __future__ import annotations

from harness.exhaustive.accumulate import Acc, Result
from harness.exhaustive.certify import closed_form_golden
from harness.exhaustive.command import exhaustive_command, run_params
from harness.exhaustive.enumerate import GATE_BLOCK, bits_of, default_chunk, finite_values, parse_range
from harness.exhaustive.impls import DEFAULT, IMPLS, torch_autograd, torch_fast
from harness.exhaustive.metrics import EDGES, budget_for, element_errors
from harness.exhaustive.results import rows, summary, write_outputs
from harness.exhaustive.run import run_exhaustive

__all__ = ["Acc", "DEFAULT", "EDGES", "GATE_BLOCK", "IMPLS", "Result", "bits_of", "budget_for", "closed_form_golden",
           "default_chunk", "element_errors", "exhaustive_command", "finite_values", "parse_range", "rows",
           "run_exhaustive", "run_params", "summary", "torch_autograd", "torch_fast", "write_outputs"]
