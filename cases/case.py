"""A case is a frozen value: every axis named, nothing hidden in defaults, a stable id."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

DTYPES = ("fp32", "fp16", "bf16")
X_DISTS = ("standard", "large", "tiny", "subnormal", "zero_row", "outlier")
GATE_DISTS = ("normal", "negative", "saturating", "underflow", "large_positive", "tiny")
GAMMA_DISTS = ("one", "zero", "outlier")
# Inputs a realistic layer does not see: kept apart so budgets and reports can tell them apart.
EXTREME_X = {"large", "tiny", "subnormal"}
EXTREME_GATE = {"saturating", "underflow"}


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

    def params(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
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
        return (f"{dt} {'x'.join(map(str, self.shape))}{zc} eps={self.eps:g} "
                f"x:{self.x_dist} gate:{self.gate_dist} gamma:{self.gamma_dist}")

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
