"""Everything the analysis needs for one case's inputs: the exact reference (float64 values and
gauges, certified golden values per output format) and each model reference asked for, each
computed once per case on first use and shared by every implementation."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.references import accel
from harness.references.certify import Certified, certify
from harness.references.exact import Inputs
from harness.references.formats import Format
from harness.references.mathclass import ACCURATE, MathClass
from harness.references.models import resolve
from harness.references.models.reference import exact_allowance, model_reference


@dataclass
class CaseReferences:
    inputs: Inputs
    values: dict[str, torch.Tensor]
    gauges: dict[str, torch.Tensor]
    golden: dict[str, Certified] = field(default_factory=dict)     # keyed "output:fmt"
    models: dict[tuple[str, str, str], dict] = field(default_factory=dict)       # (model, act, math)
    allowances: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    mp_rows: dict = field(default_factory=dict)      # mpmath rows shared by every certification

    def exact_for(self, model, act: Format, output: str, mc: MathClass = ACCURATE):
        """(lo, hi, gauge): the exact value widened by the allowance of `model` and math class `mc`
        (underflow, a fast exp's per-element noise, FTZ)."""
        key = (resolve(model).name, act.name, mc.label)
        if key not in self.allowances:
            self.allowances[key] = exact_allowance(self.inputs, model, act, mc)
        lo, hi = self.allowances[key][output]
        return lo, hi, self.gauges[output]

    def model(self, model, act: Format, output: str, mc: MathClass = ACCURATE):
        """(lo, hi, gauge) of the reference interval of `model` computed in math class `mc`."""
        key = (resolve(model).name, act.name, mc.label)
        if key not in self.models:
            self.models[key] = model_reference(self.inputs, model, act, mc)
        return self.models[key][output]

    def certified(self, output: str, fmt: Format) -> Certified:
        key = f"{output}:{fmt.name}"
        if key not in self.golden:
            self.golden[key] = certify(self.inputs, output, fmt, values=self.values, gauges=self.gauges,
                                       row_cache=self.mp_rows)
        return self.golden[key]


def build(inp: Inputs, backend: str = "auto") -> CaseReferences:
    values, gauges = accel.exact_outputs(inp, backend)
    return CaseReferences(inp, values, gauges)
