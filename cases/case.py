"""A case is a frozen value: every axis named, a stable id.

The op-variant axes (group_size, norm_before_gate) and dy_dist came later than the others; their
defaults (one group, norm first, random normal dy) are left out of the hashed parameters, so every
case written before them keeps its id (and its golden-store key and baseline rows)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

DTYPES = ("fp32", "fp16", "bf16")
X_DISTS = ("standard", "large", "tiny", "subnormal", "zero_row", "outlier")
GATE_DISTS = ("normal", "negative", "saturating", "underflow", "large_positive", "tiny")
GAMMA_DISTS = ("one", "zero", "outlier")
DY_DISTS = ("normal", "ones", "positive")      # upstream gradient: random, loss = y.sum(), one sign
# Inputs a realistic layer does not see: kept apart so budgets and reports can tell them apart.
EXTREME_X = {"large", "tiny", "subnormal"}
EXTREME_GATE = {"saturating", "underflow"}


LATER_AXES = {"group_size": None, "norm_before_gate": True, "dy_dist": "normal"}


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

    def __post_init__(self):
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
            ("" if self.norm_before_gate else " gate-first")
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
