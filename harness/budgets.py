"""Tolerance budgets: defaults derived from the declared rounding model (docs/budgets.md), per-key
overrides from a budget file, and `budgets regen`.

Against a *model* reference (an interval that already holds the float32 noise) a correct
implementation is off by its own final rounding alone: half an ULP, for every output. Against the
*exact* value: the final rounding (0.5 ULP for y — 1 ULP where declared roundings can carry y
across a power of two — and 1 in the scaled error for dx, dgate, dweight), plus the declared points' roundings (RoundingModel.relative_terms) and the float32 noise of the declared math class on the
output's path (references.models.noise.exact_path_noise), in units of the output's u, per case; in
the extreme regime the exact errors are reported and not gated. (What a class adds per element —
a fast exp's |t| — widens the exact value itself: references.models.reference.exact_allowance.)"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from harness.references.errors import UsageError
from harness.references.exact import OUTPUTS
from harness.references.formats import FORMATS, Format
from harness.references.mathclass import ACCURATE, MathClass, parse_math
from harness.references.metrics import gated_metric, get, registry
from harness.references.models import RoundingModel, resolve
from harness.references.models.noise import U32, exact_path_noise
from harness.reports.schema import gated_columns, missing_columns, reference_output

FILE_COLUMNS = ("impl", "rounding", "math", "dtype", "output", "reference", "regime", "metric", "budget")
KEY_COLUMNS = FILE_COLUMNS[:-2]        # what a line applies to; the metric and budget are its value
# The columns before the math class had one (every line then applies at every class): still read.
LEGACY_COLUMNS = tuple(c for c in FILE_COLUMNS if c != "math")
REFERENCE_KINDS = ("exact", "model")
REGIMES = ("normal", "extreme")
# `budgets regen` may grow a default budget at most this many times over (glibc keeps libm's
# budgets within 9 ULP of correct rounding); beyond that it refuses unless --allow-growth.
REGEN_GROWTH_CAP = 9.0


@dataclass(frozen=True)
class Budget:
    metric: str
    value: float
    source: str          # "default", "default (extreme: ...)" or the budget file


def exact_budget(metric: str, terms: float, noise_u32: float, out: Format, regime: str = "normal") -> float:
    """A budget against the exact value, in `metric` (units of the output's u): the metric's final
    rounding, plus the declared rounding points' relative error `terms`, plus the float32 noise on
    the output's path (`noise_u32`, in u32 = 2**-24); inf (reported, not gated) in the extreme
    regime. The sweep's default_budget and the exhaustive mode's budgets are both this."""
    if regime == "extreme":
        # Underflow (a float32 SiLU flushing to -0 below t = -88.72, subnormal intermediates)
        # makes the distance to the exact value unbounded for a correct implementation.
        return math.inf
    value = get(metric).final_rounding
    if terms and metric == "ulp":
        # the declared roundings can carry a value just below a power of two into the next
        # binade, where the final rounding's half ULP is a whole ULP of the exact value's binade
        value *= 2
    return value + (terms / out.u + noise_u32 * U32 / out.u)


def default_budget(output: str, kind: str, model: RoundingModel, out: Format, act: Format,
                   promoted: Format, group: int, tokens: int, norm_before_gate: bool,
                   regime: str = "normal", mc: MathClass = ACCURATE) -> Budget:
    """`kind`: the reference's, "exact" or "model"."""
    metric = gated_metric(output, kind)
    if kind != "exact":
        return Budget(metric, get(metric).final_rounding, "default")
    if regime == "extreme":        # the model reference models the underflow and gates here
        return Budget(metric, math.inf, "default (extreme: reported, gated by the model reference)")
    terms = model.relative_terms(output, norm_before_gate, act, promoted)
    noise = exact_path_noise(output, norm_before_gate, group, tokens, mc)
    return Budget(metric, exact_budget(metric, terms, noise, out), "default")


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
    # the math class judged at (MathClass.label): `fla` and `fla@accurate` differ. Last, with a
    # default, so that lines read from a file without the column (and older callers) stay valid; it
    # is the file's third column: build an Override by keyword, not from a file row's order
    math: str = "*"

    def matches(self, impl, rounding, dtype, output, kind, regime, math) -> bool:
        return all(want in ("*", have) for want, have in (
            (self.impl, impl), (self.rounding, rounding), (self.dtype, dtype), (self.output, output),
            (self.reference, kind), (self.regime, regime), (self.math, math)))

    def specificity(self) -> int:
        return sum(v != "*" for v in (self.impl, self.rounding, self.dtype, self.output,
                                      self.reference, self.regime, self.math))


def _check_field(path: str, line: int, key: str, value: str, allowed) -> None:
    if value != "*" and value not in allowed:
        raise UsageError(f"{path}: line {line}: {key}: unknown {value!r}; expected * or one of {', '.join(allowed)}")


def parse_budget_file(text: str, path: str) -> list[Override]:
    """CSV, one budget per line: impl,rounding,math,dtype,output,reference,regime,metric,budget ('*' =
    any; a file without the math column, as written before it existed, applies at every class).
    Every field is checked: a typo would otherwise silently match nothing."""
    reader = csv.reader(io.StringIO(text))
    numbered = [(reader.line_num, r) for r in reader]          # line numbers before filtering
    numbered = [(n, r) for n, r in numbered if r and not r[0].lstrip().startswith("#")]
    if not numbered:
        raise UsageError(f"{path}: empty budget file")
    header = tuple(h.strip() for h in numbered[0][1])
    if header not in (FILE_COLUMNS, LEGACY_COLUMNS):
        raise UsageError(f"{path}: line {numbered[0][0]}: header must be {','.join(FILE_COLUMNS)} "
                         f"(or the same without math, as written before it existed)")
    out, first_line = [], {}
    for i, r in numbered[1:]:
        if len(r) != len(header):
            raise UsageError(f"{path}: line {i}: expected {len(header)} fields, got {len(r)}")
        d = {"math": "*", **dict(zip(header, (c.strip() for c in r)))}
        _check_field(path, i, "output", d["output"], OUTPUTS)
        _check_field(path, i, "reference", d["reference"], REFERENCE_KINDS)
        _check_field(path, i, "regime", d["regime"], REGIMES)
        _check_field(path, i, "dtype", d["dtype"], [f for f in FORMATS if f != "fp64"])
        if d["rounding"] != "*":
            try:
                d["rounding"] = resolve(d["rounding"]).name
            except UsageError as e:
                raise UsageError(f"{path}: line {i}: {e}") from None
        if d["math"] != "*":
            try:
                d["math"] = parse_math(d["math"]).label
            except UsageError as e:
                raise UsageError(f"{path}: line {i}: {e}") from None
        if d["metric"] not in registry():
            raise UsageError(f"{path}: line {i}: metric: unknown {d['metric']!r}; one of {', '.join(registry())}")
        if not d["impl"]:
            raise UsageError(f"{path}: line {i}: impl: empty (use * for any)")
        try:
            b = float(d["budget"])
        except ValueError:
            raise UsageError(f"{path}: line {i}: budget: {d['budget']!r} is not a number") from None
        if not (b >= 0) or math.isinf(b):
            raise UsageError(f"{path}: line {i}: budget: {b} must be finite and >= 0")
        key = tuple(d[k] for k in KEY_COLUMNS)
        if key in first_line:            # only the first could ever apply: a second that differs is a contradiction
            line, metric, budget = first_line[key]
            if (metric, budget) == (d["metric"], b):
                continue                 # the same line again (two regenerated files put together)
            raise UsageError(f"{path}: line {i}: the same key as line {line} ({','.join(key)}) with another "
                             f"budget: one budget per key")
        first_line[key] = (i, d["metric"], b)
        out.append(Override(d["impl"], d["rounding"], d["dtype"], d["output"], d["reference"],
                            d["regime"], d["metric"], b, d["math"]))
    return out


def load_budget_file(path: str) -> list[Override]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: budget file not found")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the budget file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UsageError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
                         f"a budget file is UTF-8 CSV") from None
    return parse_budget_file(text, path)


def lookup(overrides: list[Override], default: Budget, impl, rounding, dtype, output, kind,
           regime, path: str = "budget file", *, math: str) -> Budget:
    """The most specific matching override (a budget file may also gate another registered metric
    for an output), else the default. `kind`: the reference's, "exact" or "model"; `math`: the
    class the implementation is judged at (MathClass.label)."""
    hits = [o for o in overrides if o.matches(impl, rounding, dtype, output, kind, regime, math)]
    if not hits:
        return default
    best = max(hits, key=Override.specificity)
    return Budget(best.metric, best.budget, path)


def regen(results, allow_growth: bool = False):
    """Budget lines from a results table: measured maxima rounded up to two significant digits,
    never below the default budget the rows were gated with (a bit-exact run must not leave budget 0
    for a later, legitimately reordered one). Returns (lines, grown, refused): a key whose maximum
    exceeds its budget grows, at most REGEN_GROWTH_CAP times the default unless allow_growth."""
    keys = ["impl", "rounding", "math", "out_dtype", "output", "reference_kind", "regime", "budget_metric"]
    used = [k for k in keys if k != "math"] + ["budget", *gated_columns(results)]
    if missing := missing_columns(results, used):             # "math": older files lack it, and gate any class
        raise UsageError(f"no column {missing[0]!r}: not a results.csv of this harness to take budgets from")
    ok = results[results["status"].isin(["pass", "fail"])]
    ok = ok.assign(output=ok["output"].map(reference_output),      # y_infer is gated by y's budget lines
                   # one line per class: a file regenerated at fast must not gate `fla@accurate`
                   math=(ok["math"].fillna("").astype(str).replace("", "*") if "math" in ok else "*"))
    lines, grown, refused = [], [], []
    for key, grp in ok.groupby(keys, sort=True):
        impl, rounding, mc, dtype, output, kind, regime, metric = key
        measured = float(grp[get(metric).column].max())
        old = float(grp["budget"].max())
        if not math.isfinite(old):          # reported, not gated (extreme vs exact): stays so
            continue
        line_key = (impl, rounding, mc, dtype, output, kind, regime, metric)
        if not math.isfinite(measured):
            refused.append((line_key, measured, old))
            continue
        new = max(_round_up(measured), old)
        if new > old:
            if new > REGEN_GROWTH_CAP * old and not allow_growth:
                refused.append((line_key, new, old))
                new = old
            else:
                grown.append((line_key, new, old))
        lines.append(dict(zip(FILE_COLUMNS, (*line_key, new))))
    return lines, grown, refused


def refusal(key, new: float, old: float) -> str:
    """Why regen left a key at its old budget, in one line (the command's and the pytest plugin's)."""
    why = (f"more than {REGEN_GROWTH_CAP:g} x the budget; use --allow-growth" if math.isfinite(new) else
           "the measured maximum is not finite (NaN or inf): no budget holds it; fix the failing rows")
    return f"refused ({why}): {','.join(map(str, key))}: {old:.4g} -> {new:.4g}"


def _round_up(v: float) -> float:
    if v <= 0:
        return 0.0
    e = math.floor(math.log10(v)) - 1
    return math.ceil(round(v / 10 ** e, 9)) * 10 ** e       # round(): 0.14/0.01 is 14.000000000000002


def budget_file_text(lines) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FILE_COLUMNS, lineterminator="\n")
    w.writeheader()
    for ln in lines:
        w.writerow({**ln, "budget": _budget_text(ln["budget"])})
    return buf.getvalue()


def _budget_text(v: float) -> str:
    """Six significant digits unless that reads back below the budget (a default such as
    2.00439453125 must not come back as 2.00439): then every digit."""
    short = f"{v:.6g}"
    return short if float(short) >= v else repr(float(v))
