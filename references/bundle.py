"""Everything the analysis needs for one case's inputs: the exact reference (float64 values and
gauges, certified golden values per output format) and each model reference asked for.
Computed once per case and shared by every implementation."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.references.certify import Certified, certify
from harness.references.exact import Inputs, exact_outputs
from harness.references.formats import Format
from harness.references.models import exact_allowance, model_reference


@dataclass
class CaseReferences:
    inputs: Inputs
    values: dict[str, torch.Tensor]
    gauges: dict[str, torch.Tensor]
    golden: dict[str, Certified] = field(default_factory=dict)     # keyed "output:fmt"
    models: dict[tuple[str, str], dict] = field(default_factory=dict)
    allowances: dict[tuple[str, str], dict] = field(default_factory=dict)
    mp_rows: dict = field(default_factory=dict)      # mpmath rows shared by every certification

    def exact_for(self, model: str, act: Format, output: str):
        """The exact value widened by the absolute underflow allowance of `model` (models.exact_allowance)."""
        key = (model, act.name)
        if key not in self.allowances:
            self.allowances[key] = exact_allowance(self.inputs, model, act)
        v, a = self.values[output], self.allowances[key][output]
        return v - a, v + a, self.gauges[output]

    def certified(self, output: str, fmt: Format) -> Certified:
        key = f"{output}:{fmt.name}"
        if key not in self.golden:
            self.golden[key] = certify(self.inputs, output, fmt, values=self.values, gauges=self.gauges,
                                       row_cache=self.mp_rows)
        return self.golden[key]

    def model(self, model: str, act: Format, output: str):
        key = (model, act.name)
        if key not in self.models:
            self.models[key] = model_reference(self.inputs, model, act)
        return self.models[key][output]


def build(inp: Inputs) -> CaseReferences:
    # On a GPU the compiled single-pass version (references/fast.py) is ~10x faster on big cases; a
    # compile per shape costs seconds, so small cases (and the CPU) keep the eager closed forms.
    from harness.references.fast import exact_outputs_fused, worth_fusing
    values, gauges = exact_outputs_fused(inp) if worth_fusing(inp.x) else exact_outputs(inp)
    return CaseReferences(inp, values, gauges)
