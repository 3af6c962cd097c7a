"""Tolerance budgets: defaults derived from the declared rounding model (docs/budgets.md), per-key
overrides from a budget file, and `budgets regen`.

A budget applies to one metric: `ulp` for y (a product: no cancellation), `scaled` for dx, dgate and
dweight (all can cancel to ~0). Against the *model* reference (an interval that already holds the
float32 noise) a correct implementation is off by its final rounding alone: 0.5 ulp for y,
1 u*gauge for the others. Against the *exact* reference the declared intermediate roundings and
the float32 noise come on top, derived per case from the noise model in references.models."""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.references.formats import Format
from harness.references.models import noise

METRIC = {"y": "ulp", "dx": "scaled", "dgate": "scaled", "dweight": "scaled"}
FINAL_ROUNDING = {"ulp": 0.5, "scaled": 1.0}
# Which float32 noise terms (references.models.noise) reach each output.
NOISE_PATH = {"y": ("n", "y"), "dgate": ("n", "dgate"), "dx": ("n", "dn", "dx"),
              "dweight": ("n", "dn", "dweight")}
FILE_COLUMNS = ("impl", "rounding", "dtype", "output", "reference", "regime", "metric", "budget")
REGEN_CAP = 9.0          # glibc keeps libm's budgets at or below 9 ULP; growth past it is refused


@dataclass(frozen=True)
class Budget:
    metric: str
    value: float
    source: str          # "default" or the budget file


def default_budget(output: str, reference: str, rounding: str, out: Format, act: Format, inp,
                   regime: str = "normal") -> Budget:
    metric = METRIC[output]
    value = FINAL_ROUNDING[metric]
    if reference == "exact" and regime == "extreme":
        # Underflow (float32 SiLU flushing to -0 below t = -88.72, subnormal intermediates) makes
        # the distance to the exact value unbounded for a correct implementation; the model
        # reference models it and gates here, the exact errors are reported (docs/budgets.md).
        return Budget(metric, math.inf, "default (extreme: reported, gated by the model reference)")
    if reference == "exact":
        if rounding == "chain" and output in NOISE_PATH:
            value += act.u / out.u                 # the rounding of n (y, dgate) or dn (dx, dweight)
        rho = noise(inp)
        value += sum(rho[k] for k in NOISE_PATH[output]) / out.u
    return Budget(metric, value, "default")


@dataclass(frozen=True)
class Override:
    impl: str
    rounding: str
    dtype: str
    output: str
    reference: str
    regime: str
    metric: str
    budget: float

    def matches(self, impl, rounding, dtype, output, reference, regime) -> bool:
        return all(want in ("*", have) for want, have in (
            (self.impl, impl), (self.rounding, rounding), (self.dtype, dtype), (self.output, output),
            (self.reference, reference), (self.regime, regime)))

    def specificity(self) -> int:
        return sum(v != "*" for v in (self.impl, self.rounding, self.dtype, self.output,
                                      self.reference, self.regime))


def parse_budget_file(text: str, path: str) -> list[Override]:
    """CSV, one budget per line: impl,rounding,dtype,output,reference,regime,metric,budget ('*' = any)."""
    reader = csv.reader(io.StringIO(text))
    numbered = [(reader.line_num, r) for r in reader]          # line numbers before filtering
    numbered = [(n, r) for n, r in numbered if r and not r[0].lstrip().startswith("#")]
    rows = [r for _, r in numbered]
    if not rows:
        raise UsageError(f"{path}: empty budget file")
    header = [h.strip() for h in rows[0]]
    if tuple(header) != FILE_COLUMNS:
        raise UsageError(f"{path}: line {numbered[0][0]}: header must be {','.join(FILE_COLUMNS)}")
    out = []
    for i, r in numbered[1:]:
        if len(r) != len(FILE_COLUMNS):
            raise UsageError(f"{path}: line {i}: expected {len(FILE_COLUMNS)} fields, got {len(r)}")
        d = dict(zip(FILE_COLUMNS, (c.strip() for c in r)))
        if d["output"] not in (*METRIC, "*"):
            raise UsageError(f"{path}: line {i}: output: unknown {d['output']!r}")
        if d["reference"] not in ("exact", "model", "*"):
            raise UsageError(f"{path}: line {i}: reference: unknown {d['reference']!r}")
        if d["metric"] not in ("ulp", "scaled"):
            raise UsageError(f"{path}: line {i}: metric: unknown {d['metric']!r} (ulp or scaled)")
        if d["output"] != "*" and d["metric"] != METRIC[d["output"]]:
            raise UsageError(f"{path}: line {i}: metric: {d['output']} is budgeted in {METRIC[d['output']]}")
        try:
            b = float(d["budget"])
        except ValueError:
            raise UsageError(f"{path}: line {i}: budget: {d['budget']!r} is not a number") from None
        if not (b >= 0) or math.isinf(b):
            raise UsageError(f"{path}: line {i}: budget: {b} must be finite and >= 0")
        out.append(Override(d["impl"], d["rounding"], d["dtype"], d["output"], d["reference"],
                            d["regime"], d["metric"], b))
    return out


def load_budget_file(path: str) -> list[Override]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: budget file not found")
    return parse_budget_file(p.read_text(), path)


def lookup(overrides: list[Override], default: Budget, impl, rounding, dtype, output, reference,
           regime, path: str = "budget file") -> Budget:
    # an override never changes what an output is measured in (a '*' output line applies only
    # to the outputs budgeted in its metric)
    hits = [o for o in overrides if o.matches(impl, rounding, dtype, output, reference, regime)
            and o.metric == METRIC[output]]
    if not hits:
        return default
    best = max(hits, key=Override.specificity)
    return Budget(best.metric, best.budget, path)


def regen(results, cap: float = REGEN_CAP, allow_growth: bool = False):
    """Budget lines from measured maxima (rounded up to 2 significant digits) of a results table.

    Returns (lines, grown, refused): keys whose measured maximum exceeds the default budget grow;
    past `cap` they are refused unless allow_growth."""
    ok = results[results["status"].isin(["pass", "fail"])]
    lines, grown, refused = [], [], []
    keys = ["impl", "rounding", "out_dtype", "output", "reference", "regime", "budget_metric"]
    for key, grp in ok.groupby(keys, sort=True):
        impl, rounding, dtype, output, reference, regime, metric = key
        col = "max_ulp" if metric == "ulp" else "max_scaled_err"
        measured = float(grp[col].max())
        old = float(grp["budget"].max())
        if not math.isfinite(old):          # reported, not gated (extreme vs exact): stays so
            continue
        if not math.isfinite(measured):
            refused.append((key, measured, old))
            continue
        new = _round_up(measured)
        if new > old:
            if new > cap and not allow_growth:
                refused.append((key, new, old))
                new = old
            else:
                grown.append((key, new, old))
        lines.append(dict(zip(FILE_COLUMNS, (impl, rounding, dtype, output, reference, regime, metric, new))))
    return lines, grown, refused


def _round_up(v: float) -> float:
    if v <= 0:
        return 0.0
    e = math.floor(math.log10(v)) - 1
    return math.ceil(round(v / 10 ** e, 9)) * 10 ** e       # round(): 0.14/0.01 is 14.000000000000002


def write_budget_file(lines, path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FILE_COLUMNS)
        w.writeheader()
        for ln in lines:
            w.writerow({**ln, "budget": f"{ln['budget']:.6g}"})


def derivation_table(hidden: int = 4096, tokens: int = 4096) -> str:
    """The default budget formulas per (rounding, reference, output, regime) (docs/budgets.md),
    with the value each gives for bf16 (activation and output) at `hidden` x `tokens`."""
    from types import SimpleNamespace

    from harness.references.formats import fmt_of

    terms = {"n": "rho_n", "y": "rho_y", "dn": "rho_dn", "dgate": "rho_dgate", "dx": "rho_dx",
             "dweight": "rho_dw"}
    inter = {"y": "n", "dgate": "n", "dx": "dn", "dweight": "dn"}
    bf16 = fmt_of("bf16")
    inp = SimpleNamespace(hidden=hidden, tokens=tokens)
    head = ("rounding", "reference", "output", "regime", "metric", "formula",
            f"bf16 H={hidden} T={tokens}")
    rows = []
    for rounding in ("chain", "fused"):
        for reference in ("model", "exact"):
            for output in METRIC:
                for regime in ("normal", "extreme"):
                    metric = METRIC[output]
                    final = FINAL_ROUNDING[metric]
                    if reference == "model":
                        formula = f"{final:g} {metric}  (final rounding only)"
                    elif regime == "extreme":
                        formula = "inf  (reported; gated by the model reference)"
                    else:
                        parts = [f"{final:g}"]
                        if rounding == "chain":
                            parts.append(f"u_a/u_o ({inter[output]} rounded)")
                        parts.append("(" + " + ".join(terms[k] for k in NOISE_PATH[output]) + ")/u_o")
                        formula = " + ".join(parts) + f" {metric}"
                    b = default_budget(output, reference, rounding, bf16, bf16, inp, regime)
                    rows.append((rounding, reference, output, regime, metric, formula, f"{b.value:.6g}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:{w}s}}" for w in widths)
    lines = [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r).rstrip() for r in rows]
    lines += [
        "",
        "u_o = 2^-p of the output's format (bf16 2^-8, fp16 2^-11, fp32 2^-24); u_a the same for the",
        "activation format (n, dn rounded there in the chain model); u32 = 2^-24. float32 noise, in u32",
        "relative to each output's gauge: rho_n = 6 + log2 H + sqrt H, rho_dn = 8, rho_y = 8,",
        "rho_dgate = 12, rho_dx = 4 + log2 H + sqrt H, rho_dw = 4 + log2 T + sqrt T.",
        "metric: ulp = |c - ref| / ulp(ref); scaled = |c - ref| / (u_o * gauge + min_subnormal/2).",
        "extreme regime: x large/tiny/subnormal, gates saturating/underflow, or eps >= 0.1. "
        "Overrides: --budgets FILE. See docs/budgets.md.",
    ]
    return "\n".join(lines)
