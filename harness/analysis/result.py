"""The typed result of one (case, implementation) pair: its checks, each with its reference (the
rounding model as an object), budget, comparison numbers, status and `fail_kind`, and the facts a
failure's words are made of (harness.analysis.explain words them; nothing reads words back).

A check's status is `pass`, `fail`, `error` or `skip`; `fail_kind` says why it did not pass (empty
when it did) — one of FAIL_KINDS. results.csv carries both, and the reference four ways: its
label (`exact`, `model:NAME`, `model:NAME@CLASS`: SPEC §5's `reference` column, written for people
and joins), its kind, its model's name and its math class (the columns the reports, identify and
`--resume` read)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.budgets import Budget
from harness.cases.case import Case
from harness.references.mathclass import MathClass
from harness.references.models import RoundingModel

FAIL_KINDS = {
    "over_budget": "the gated metric's worst element is over its budget",
    "non_finite": "a non-finite output where the reference rounds to a finite value",
    "nan_reference": "the reference is NaN there: a NaN never passes",
    "contract": "the output breaks the plug-in contract (dtype, shape, a missing gradient, not a plain tensor)",
    "not_repeatable": "a later call on the same inputs gave other bits",
    "regressed": "worse than the baseline beyond its margin",
    "error": "the implementation raised, died or hung: nothing was measured",
    "skip": "the implementation declined the case: nothing was measured",
}
# The kinds a verdict is recomputed for when budgets, the baseline or --allow-nondeterministic
# change (--resume, --baseline): they depend on the measured numbers and a policy, not on the output.
REGATED = ("", "over_budget", "not_repeatable", "regressed")


@dataclass(frozen=True)
class Reference:
    """What a check measures against: the exact value (widened by the allowance of `model` and
    `math`, the declared ones) or the reference interval of `model` computed in math class `math`.
    `label` names it in results.csv (harness.analysis.check.references_of makes it; never parsed)."""
    kind: str                       # "exact" or "model"
    model: RoundingModel
    math: MathClass
    label: str

    @property
    def model_name(self) -> str:
        """The model measured against (results.csv `reference_model`); blank for the exact value."""
        return "" if self.kind == "exact" else self.model.name


@dataclass(frozen=True)
class Finding:
    """Why a check did not pass, as data: `kind` (a FAIL_KINDS key), the element concerned, the
    values involved, and for what only the implementation's side can say (a contract problem, an
    exception, a declined case) its own words."""
    kind: str
    index: tuple[int, ...] = ()
    value: float = math.nan          # the worst / non-finite / first call's / regressed value
    other: float = math.nan          # the exact value behind a NaN reference; a later call's value; the baseline's
    limit: float = math.nan          # the budget, or the regression threshold
    metric: str = ""                 # the metric `value` and `limit` are in
    count: int = 0                   # elements concerned (not_repeatable)
    text: str = ""


@dataclass(frozen=True)
class ElementRecord:
    """One element of a comparison, down to the bit (harness.analysis.explain builds it)."""
    index: tuple[int, ...]
    inputs: str
    got: float
    got_hex: str
    lo: float                     # the reference interval
    hi: float
    exact: float                  # the float64 exact value
    golden: float | None          # the certified correctly rounded value in the output's format
    golden_hex: str
    metrics: dict[str, float]


@dataclass(frozen=True)
class Measurement:
    """A comparison's numbers (harness.analysis.compare), reduced."""
    maxima: dict[str, float]          # metric name -> worst element's error
    means: dict[str, float]
    worst_value: float                # the gated metric's worst
    worst_index: tuple[int, ...]
    worst_ref: float                  # the reference interval's nearest point to the worst element
    p99_ulp: float
    count_over: int
    n_elements: int
    elements: tuple[ElementRecord, ...] = ()    # the worst element first, then the next worst asked for
    cr_mismatch: int | None = None    # exact checks: elements that are not the certified value
    certified: int | None = None
    uncertified: int | None = None


@dataclass(frozen=True)
class Repeat:
    """One output over the calls after the first on the same inputs: the elements whose bits
    differ (index, first call's and the later call's value of the first of them), or what a later
    call raised."""
    count: int = 0
    index: tuple[int, ...] = ()
    first: float = math.nan
    later: float = math.nan
    error: str = ""


@dataclass(frozen=True)
class Check:
    output: str
    out_dtype: str
    reference: Reference
    budget: Budget | None             # None where nothing was measured (error, skip)
    status: str                       # pass, fail, error, skip
    finding: Finding | None = None    # None when it passed
    measured: Measurement | None = None
    repeat: Repeat | None = None      # None where the output was not called again

    @property
    def fail_kind(self) -> str:
        return "" if self.finding is None else self.finding.kind

    @property
    def budget_metric(self) -> str:
        from harness.references.metrics import gated_metric
        return self.budget.metric if self.budget is not None else gated_metric(self.output, self.reference.kind)


@dataclass(frozen=True)
class Speed:
    """Warm calls after the judged one. `impl_seconds`: the median wall time of a forward +
    backward, host-inclusive (Python, launches, the final sync); on CUDA also `gpu_seconds`, the
    GPU time of one (`gpu_method`: "graph", CUDA-graph replay; "profiler", torch.profiler's summed
    device time; "" where neither worked), the bytes a fused call must move, and the share of the
    copy-bandwidth floor the GPU time reaches."""
    impl_seconds: float = math.nan
    gpu_seconds: float = math.nan
    gpu_method: str = ""
    bytes_moved: int | None = None
    floor_fraction: float = math.nan


@dataclass(frozen=True)
class PairResult:
    """Everything one pair produced. `impl` is the implementation's declaration (its factory is not
    carried: the side that judges never holds the implementation's code)."""
    case: Case
    impl: object                      # harness.impls.base.Implementation, factory None
    device: str
    act_dtype: str
    checks: tuple[Check, ...]
    replay: str = ""
    suite: str = ""                   # what the replay command's --cases names
    impl_spec: str = ""               # what produced it: --impl's text (or the factory's MODULE:QUALNAME)
    impl_hash: str = ""               # ... and a hash of its source (harness.impls.source)
    speed: Speed | None = None
    inputs_modified: tuple[str, ...] = ()     # inputs a call changed in its own copy
    notes: tuple[str, ...] = ()       # what the pair did besides its checks (for people)
    times: dict = field(default_factory=dict)  # stage -> seconds (references, impl, timing, analysis, mpmath)
    pair_seconds: float = 0.0

    @property
    def status(self) -> str:
        """The pair's worst status: error, fail, pass, or skip when every check was skipped."""
        statuses = {c.status for c in self.checks}
        for s in ("error", "fail", "pass"):
            if s in statuses:
                return s
        return "skip"
