"""What a run has finished, kept in its output directory so that an interrupted run resumes by range.

After each gate block (enumerate.GATE_BLOCK bit patterns of the gate range) the run's accumulated
statistics and the finished blocks are written to one JSON file, atomically (references.atomic):
a kill at any moment leaves the previous complete state. `--resume` loads it, skips the finished
blocks and folds the rest on top (accumulators are sums over disjoint pairs, see accumulate).
The file is named by the run's case hash (dtype, ranges, dy) and implementation; its key is checked
on load. Floats are written with repr (json), so a resumed run restores every value exactly."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.exhaustive.accumulate import Acc
from harness.exhaustive.enumerate import GATE_BLOCK, OUTPUTS, REGIMES
from harness.references.atomic import atomic_write
from harness.references.errors import UsageError

VERSION = 1


def progress_path(out_dir: Path | str, dtype: str, impl: str, case_hash: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in impl)
    return Path(out_dir) / f"exhaustive-{dtype}-{safe}-{case_hash}.progress.json"


def run_key(dtype: str, impl: str, x_range, gate_range, dy_bits: int, activation: str = "silu") -> dict:
    key = {"version": VERSION, "dtype": dtype, "impl": impl, "x_range": list(x_range),
           "gate_range": list(gate_range), "dy_bits": dy_bits, "gate_block": GATE_BLOCK}
    return key if activation == "silu" else {**key, "activation": activation}     # silu's files as before


def fresh_acc() -> dict:
    return {(o, r): Acc() for o in OUTPUTS for r in REGIMES}


@dataclass
class Checkpoint:
    """The finished gate blocks ((lo, hi) bit spans) and the statistics over them."""
    path: Path | None
    key: dict
    done: set = field(default_factory=set)
    acc: dict = field(default_factory=fresh_acc)
    perf: dict = field(default_factory=dict)

    def save(self, span: tuple[int, int]) -> None:
        self.done.add(tuple(span))
        if self.path is None:
            return
        doc = {"key": self.key, "done": sorted(self.done), "perf": self.perf,
               "acc": {f"{o}/{r}": a.to_dict() for (o, r), a in self.acc.items()}}
        with atomic_write(self.path, "w") as f:
            json.dump(doc, f)


def open_checkpoint(path: Path | None, key: dict, resume: bool, spans=()) -> Checkpoint:
    """A fresh checkpoint, or (resume) the one saved at `path` for the same run, whose finished
    blocks are among `spans` (the run's gate blocks) and whose statistics are whole: every
    (output, regime) there, counts whole numbers, and each output over as many pairs as the others
    (all or none of them, as the blocks done say) — a file edited, cut or of another version would
    otherwise be folded into the run's results as if it were its own."""
    if not resume or path is None or not path.exists():
        return Checkpoint(path, key)
    try:
        doc = json.loads(path.read_text())
        if doc["key"] != key:
            raise ValueError("it belongs to another run")
        acc = {tuple(k.split("/")): Acc.from_dict(v) for k, v in doc["acc"].items()}
        done = {tuple(s) for s in doc["done"]}
        _check(done, acc, set(map(tuple, spans)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"--resume: cannot read {path} ({type(e).__name__}: {e}); delete it or run "
                         f"without --resume") from None
    return Checkpoint(path, key, done, acc, dict(doc.get("perf", {})))


COUNTS = ("pairs", "over", "mismatch", "flagged", "certified", "uncertified", "nonfinite")
VALUES = ("sum_ulp", "sum_scaled", "max_ulp", "max_scaled", "max_abs", "max_rel")     # NaN fails v >= 0


def _check(done: set, acc: dict, spans: set) -> None:
    """ValueError naming what the saved state lacks to be a run's own (see open_checkpoint)."""
    if not done <= spans:
        raise ValueError(f"finished block {sorted(done - spans, key=repr)[0]} is not a gate block of this run")
    if set(acc) != set(fresh_acc()):
        raise ValueError("its statistics do not cover every output and regime")
    bins = len(Acc().hist_ulp)
    for (o, r), a in acc.items():
        counts = [getattr(a, c) for c in COUNTS] + list(a.hist_ulp) + list(a.hist_scaled)
        if len(a.hist_ulp) != bins or len(a.hist_scaled) != bins or \
                not all(type(n) is int and n >= 0 for n in counts):
            raise ValueError(f"{o}/{r}: a count that is not a whole number >= 0, or histograms not of {bins} bins")
        values = [getattr(a, c) for c in VALUES] + [getattr(w, f) for ws in a.worst.values() for w in ws
                                                    for f in ("key", "ulp", "scaled")]
        if set(a.worst) != {"ulp", "scaled"} or not all(type(v) in (int, float) and v >= 0 for v in values):
            raise ValueError(f"{o}/{r}: an error, sum or maximum that is not a number >= 0")
    pairs = {o: sum(a.pairs for (oo, _), a in acc.items() if oo == o) for o in OUTPUTS}
    if len(set(pairs.values())) != 1 or (not done and max(pairs.values()) > 0):
        raise ValueError(f"its outputs' pair counts ({pairs}) do not fit {len(done)} finished blocks")
