"""Running statistics of one (output, regime) and the result of a run."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from harness.exhaustive.enumerate import REGIMES, case_hash
from harness.exhaustive.metrics import TOPK
from harness.references.formats import Format, round_to


@dataclass
class Worst:
    key: float
    x: float
    g: float
    got: float
    ref: float
    golden: float
    ulp: float
    scaled: float


def pair_values(flat_idx: torch.Tensor, shape, xs, gs, rep_x) -> tuple[list[float], list[float]]:
    """x and gate values (as floats) of flat indices into a tile of `shape`: [bx, bg] pairs, or
    [bg] gates for a per-gate output (dn), whose x is rep_x."""
    if len(shape) == 1:
        gi = gs[flat_idx]
        xi = rep_x.expand(flat_idx.numel())
    else:
        ix, ig = flat_idx // shape[1], flat_idx % shape[1]
        xi, gi = xs[ix], gs[ig]
    return xi.double().tolist(), gi.double().tolist()


def worst_pairs(keys: torch.Tensor, idx: torch.Tensor, xi: list, gi: list, c_low: torch.Tensor, v: torch.Tensor,
                err: torch.Tensor, scaled: torch.Tensor, fmt: Format) -> list[Worst]:
    """The Worst records of a tile's top-k flat indices `idx` (sort keys `keys`)."""
    vv = v.reshape(-1)[idx]
    cols = (keys.tolist(), xi, gi, c_low.reshape(-1)[idx].to(torch.float64).tolist(), vv.tolist(),
            round_to(vv, fmt).tolist(), err.reshape(-1)[idx].tolist(), scaled.reshape(-1)[idx].tolist())
    return [Worst(*row) for row in zip(*cols)]


@dataclass
class Acc:
    """Running statistics of one (output, regime)."""
    pairs: int = 0
    hist_ulp: torch.Tensor | None = None
    hist_scaled: torch.Tensor | None = None
    sum_ulp: float = 0.0
    sum_scaled: float = 0.0
    max_ulp: float = 0.0
    max_scaled: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    over: int = 0                  # pairs over budget (in the budget metric)
    mismatch: int = 0              # computed != correctly rounded golden
    flagged: int = 0               # float64 undecided (pairs)
    certified: int = 0
    uncertified: int = 0
    nonfinite: int = 0             # NaN / inf where the golden value is finite
    worst: dict = field(default_factory=lambda: {"ulp": [], "scaled": []})

    def add_worst(self, metric: str, items: list[Worst]):
        w = self.worst[metric] + items
        w.sort(key=lambda r: -r.key if not math.isnan(r.key) else -math.inf)
        self.worst[metric] = w[:TOPK]


@dataclass
class Result:
    dtype: str
    impl: str
    rounding: str
    device: str
    x_range: tuple[int, int]
    gate_range: tuple[int, int]
    dy: float
    dy_bits: int
    n_x: int
    n_gate: dict
    acc: dict                   # (output, regime) -> Acc
    seconds: float
    case_hash: str
    perf: dict = field(default_factory=dict)     # counters of the fused path (tiles, syncs, ...)


class Ticker:
    """Progress lines at most every 2 s (and at the end) for both run paths."""

    def __init__(self, total: int, progress):
        self.total, self.progress, self.done = total, progress, 0
        self.t0 = self.last = time.perf_counter()

    def add(self, pairs: int) -> None:
        self.done += pairs
        now = time.perf_counter()
        if self.progress and (now - self.last > 2.0 or self.done == self.total):
            self.progress(f"exhaustive: {self.done / self.total:6.1%} {self.done:.3g}/{self.total:.3g} pairs, "
                          f"{self.done / max(now - self.t0, 1e-9):.3g} pairs/s")
            self.last = now

    def result(self, su, dtype, impl, dev, x_range, gate_range, dy_v, n_x, acc, perf=None) -> "Result":
        """Stop the clock (after the device finishes) and package the run."""
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return Result(dtype, impl, su.rounding, str(dev.type), tuple(x_range), tuple(gate_range), dy_v,
                      su.dy_bits, n_x, {r: su.gsets[r].numel() for r in REGIMES}, acc,
                      time.perf_counter() - self.t0, case_hash(dtype, x_range, gate_range, su.dy_bits),
                      perf if perf is not None else {})
