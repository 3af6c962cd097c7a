"""A case is a frozen value: every axis named, a stable id.

The op-variant axes (group_size, norm_before_gate, activation) and dy_dist came later than the
others; their defaults (one group, norm first, random normal dy, a silu gate) are left out of the
hashed parameters, so every case written before them keeps its id (and its golden-store key and baseline rows).

Every path that takes a case from outside (suite files, `replay --case` JSON, results.csv rows of
merge and replay) checks its parameters here, once: `param_problem` for one value, `from_params`
for a whole case, each problem one line naming the value and the fix (UsageError, exit 2). A
Case is valid by construction: building an invalid one is a bug of the harness (ValueError)."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Mapping

from harness.references.closed_forms import ACTIVATIONS
from harness.references.errors import UsageError

DTYPES = ("fp32", "fp16", "bf16")
X_DISTS = ("standard", "large", "tiny", "subnormal", "zero_row", "outlier")
GATE_DISTS = ("normal", "negative", "saturating", "underflow", "large_positive", "tiny")
GAMMA_DISTS = ("one", "zero", "outlier")
DY_DISTS = ("normal", "ones", "positive")      # upstream gradient: random, loss = y.sum(), one sign
# Inputs a realistic layer does not see: kept apart so budgets and reports can tell them apart.
EXTREME_X = {"large", "tiny", "subnormal"}
EXTREME_GATE = {"saturating", "underflow"}


LATER_AXES = {"group_size": None, "norm_before_gate": True, "dy_dist": "normal", "activation": "silu"}
MAX_DIMS = 4
MAX_ELEMENTS = 1 << 31               # per tensor: the kernels under test index with int32
# eps enters float32 math: outside float32's normal range it is 0 or inf there (an infinite eps
# makes every output 0, which verifies nothing)
EPS_RANGE = (2.0 ** -126, 3.4028234663852886e38)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _choice(allowed):
    return lambda v: None if isinstance(v, str) and v in allowed else f"is not one of {', '.join(allowed)}"


def _shape(v):
    if not (isinstance(v, (list, tuple)) and 1 <= len(v) <= MAX_DIMS and all(_is_int(s) for s in v)):
        return f"is not a list of 1 to {MAX_DIMS} integers (hidden size last), e.g. [4, 128]"
    if any(s <= 0 for s in v):
        return "has a size <= 0; every size is a positive integer"
    if math.prod(v) > MAX_ELEMENTS:
        return "has more than 2**31 elements; use a smaller shape"
    return None


def _bool(v):
    return None if isinstance(v, bool) else "is not true/false (a boolean, not text or a number)"


def _eps(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "is not a number; use a positive number such as 1e-5"
    if not (math.isfinite(v) and EPS_RANGE[0] <= v <= EPS_RANGE[1]):
        return ("is not a positive, finite number within float32's normal range (1.2e-38 to 3.4e38), where "
                "the op's float32 math keeps it; use e.g. 1e-5")
    return None


def _seed(v):
    return None if _is_int(v) and v >= 0 else "is not a non-negative integer"


def _group(v):
    return None if v is None or (_is_int(v) and v >= 1) else "is not a positive integer (or absent: one group)"


PARAM_CHECKS = {
    "dtype": _choice(DTYPES), "gate_dtype": _choice(DTYPES), "weight_dtype": _choice(DTYPES), "shape": _shape,
    "zero_centered_gamma": _bool, "eps": _eps, "x_dist": _choice(X_DISTS), "gate_dist": _choice(GATE_DISTS),
    "gamma_dist": _choice(GAMMA_DISTS), "seed": _seed, "group_size": _group, "norm_before_gate": _bool,
    "dy_dist": _choice(DY_DISTS), "activation": _choice(ACTIVATIONS),
}


def param_problem(key: str, value) -> str | None:
    """What is wrong with one parameter's value (a phrase completing "KEY: VALUE ..."), or None."""
    return PARAM_CHECKS[key](value)


def case_problem(params: Mapping) -> str | None:
    """The first problem of a whole case's parameters, as one line "key: value reason", or None."""
    for key, check in PARAM_CHECKS.items():
        if key in params:
            why = check(params[key])
            if why:
                return f"{key}: {params[key]!r} {why}"
    group, shape = params.get("group_size"), params.get("shape")
    if group is not None and shape[-1] % group:
        return (f"group_size: {group} does not divide the hidden size {shape[-1]}; use a divisor of it "
                f"(or leave it out: one group)")
    return None


def from_params(params, where: str) -> "Case":
    """A Case from its parameters as a user gives them (a JSON object, a row's values): every key
    known, the required ones present, every value checked; else UsageError "WHERE: key: value
    reason". The later axes may be left out (their defaults)."""
    if not isinstance(params, Mapping):
        raise UsageError(f"{where}: expected the case's parameters as an object of key: value, got {params!r}")
    known = [f.name for f in fields(Case)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise UsageError(f"{where}: {unknown[0]}: unknown parameter; known: {', '.join(known)}")
    missing = [k for k in known if k not in params and k not in LATER_AXES]
    if missing:
        raise UsageError(f"{where}: {missing[0]}: missing (required)")
    why = case_problem(params)
    if why:
        raise UsageError(f"{where}: {why}")
    return Case(**params)


@dataclass(frozen=True)
class Case:
    dtype: str                   # x's dtype
    gate_dtype: str
    weight_dtype: str
    shape: tuple[int, ...]       # [..., hidden]
    zero_centered_gamma: bool
    eps: float
    x_dist: str
    gate_dist: str
    gamma_dist: str
    seed: int
    group_size: int | None = None        # channels per group of the norm's mean; None: the hidden size
    norm_before_gate: bool = True        # False: the Mamba-2 order, y = RMSNorm(x * silu(gate))
    dy_dist: str = "normal"
    activation: str = "silu"             # the gate's function: silu(t) = t sigmoid(t), or sigmoid(t)

    def __post_init__(self):
        why = case_problem({f.name: getattr(self, f.name) for f in fields(self)})
        if why:
            raise ValueError(f"invalid case: {why}")
        object.__setattr__(self, "shape", tuple(self.shape))       # one spelling per case (one id)
        object.__setattr__(self, "eps", float(self.eps))
        if self.group_size is not None and self.group_size == self.shape[-1]:
            object.__setattr__(self, "group_size", None)       # one spelling per case (one id)

    @property
    def hidden(self) -> int:
        return self.shape[-1]

    @property
    def tokens(self) -> int:
        t = 1
        for s in self.shape[:-1]:
            t *= s
        return t

    @property
    def regime(self) -> str:
        extreme = self.x_dist in EXTREME_X or self.gate_dist in EXTREME_GATE or self.eps >= 0.1
        return "extreme" if extreme else "normal"

    @property
    def group(self) -> int:
        return self.group_size or self.hidden

    def params(self) -> dict:
        """Every parameter, the later axes only where they differ from their defaults."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        for k, default in LATER_AXES.items():
            if d[k] == default:
                del d[k]
        return d

    @property
    def case_id(self) -> str:
        """Hash of every parameter (seed included): stable across runs, processes and machines."""
        blob = json.dumps(self.params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        dt = self.dtype
        if self.gate_dtype != self.dtype:
            dt += f"/g:{self.gate_dtype}"
        if self.weight_dtype != self.dtype:
            dt += f"/w:{self.weight_dtype}"
        zc = " zc" if self.zero_centered_gamma else ""
        variant = (f" G={self.group_size}" if self.group_size else "") + \
            ("" if self.norm_before_gate else " gate-first") + \
            ("" if self.activation == "silu" else f" {self.activation}")
        dy = "" if self.dy_dist == "normal" else f" dy:{self.dy_dist}"
        return (f"{dt} {'x'.join(map(str, self.shape))}{zc}{variant} eps={self.eps:g} "
                f"x:{self.x_dist} gate:{self.gate_dist} gamma:{self.gamma_dist}{dy}")

    def to_toml(self) -> str:
        """One suite entry that reproduces exactly this case (printed by hypothesis shrinking)."""
        def val(v):
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, str):
                return f'"{v}"'
            if isinstance(v, float):
                return repr(v)
            if isinstance(v, list):
                return "[" + ", ".join(val(i) for i in v) + "]"
            return str(v)
        lines = ["[[case]]"] + [f"{k} = {val(v)}" for k, v in self.params().items()]
        return "\n".join(lines)


def distinct(cases) -> list[Case]:
    """Each case once, in first-given order: one case_id is one case (the hash of every parameter),
    and results.csv holds one line per pair and output."""
    return list({c.case_id: c for c in cases}.values())
