"""Running statistics of one (output, regime), the result of a run, and progress lines.

Invariants: an Acc is a sum over disjoint sets of pairs, so folding tiles (or gate blocks, or a
resumed run's saved state) in any grouping gives the same counts, histograms, maxima and worst
pairs; only the float64 sums behind the means depend on the order. The worst pairs are the TOPK
largest errors in the total order (error descending, then x bits, then gate bits ascending): the
pairs compare's argmax would pick first on the [x, gate] grid, independent of the tiling."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from harness.exhaustive.metrics import N_BINS, TOPK


@dataclass(frozen=True)
class Worst:
    key: float                    # the error this list is ranked by
    x_bits: int
    g_bits: int
    x: float
    g: float
    got: float                    # the implementation's value
    ref: float                    # the exact (float64) value
    golden: float                 # ref rounded to the format by float64
    ulp: float
    scaled: float

    def order(self) -> tuple:
        return (-self.key, self.x_bits, self.g_bits)


def _zeros() -> list[int]:
    return [0] * N_BINS


@dataclass
class Acc:
    """Running statistics of one (output, regime)."""
    pairs: int = 0
    hist_ulp: list = field(default_factory=_zeros)
    hist_scaled: list = field(default_factory=_zeros)
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

    def add_worst(self, metric: str, items: list[Worst]) -> None:
        self.worst[metric] = sorted(self.worst[metric] + list(items), key=Worst.order)[:TOPK]

    def kth_key(self, metric: str) -> float | None:
        """The key a pair must reach to enter the list (None while it is not full)."""
        lst = self.worst[metric]
        return lst[-1].key if len(lst) >= TOPK else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["worst"] = {m: [asdict(w) for w in lst] for m, lst in self.worst.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Acc":
        d = dict(d)
        d["worst"] = {m: [Worst(**w) for w in lst] for m, lst in d["worst"].items()}
        return cls(**d)


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
    n_gate: dict                # regime -> finite gates of the range
    acc: dict                   # (output, regime) -> Acc
    seconds: float              # this process's sweep (a resumed run: the part it did)
    case_hash: str
    perf: dict = field(default_factory=dict)     # counters: tiles, syncs, backend, pairs_run, ...
    activation: str = "silu"    # the gate's function: silu or sigmoid


class Ticker:
    """Progress lines at most every 2 s (and at the end)."""

    def __init__(self, total: int, progress, done: int = 0):
        self.total, self.progress, self.done = total, progress, done
        self.t0 = self.last = time.perf_counter()
        self.run = 0

    def add(self, pairs: int) -> None:
        self.done += pairs
        self.run += pairs
        now = time.perf_counter()
        if self.progress and (now - self.last > 2.0 or self.done == self.total):
            self.progress(f"exhaustive: {self.done / self.total:6.1%} {self.done:.3g}/{self.total:.3g} pairs, "
                          f"{self.run / max(now - self.t0, 1e-9):.3g} pairs/s")
            self.last = now

    def seconds(self, dev: torch.device) -> float:
        """Stop the clock after the device finishes."""
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter() - self.t0
