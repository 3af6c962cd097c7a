"""Explain, the second half of a check: the record of one element of a comparison, down to the bit —
its inputs (decimal and hex), what the implementation computed, the exact value, the certified
correctly rounded value, the reference interval, and every metric — built only where asked for (a
check's worst element; `harness replay`'s top elements), returned as data; and `reason`, the one
place a check's typed Finding becomes the words results.csv, the CLI and the reports show. Words
are made here and only read by people: the verdict lives in the typed fields."""
from __future__ import annotations

import math

import torch

from harness.analysis.compare import Comparison
from harness.analysis.result import ElementRecord, Finding
from harness.references.exact import Inputs
from harness.references.formats import bits_hex
from harness.references.metrics import unravel


def _value(t: torch.Tensor) -> str:
    return f"{bits_hex(t)} ({float(t):.9g})"


def element_inputs(inp: Inputs, output: str, index: tuple[int, ...]) -> str:
    """The inputs behind one element of `output`; dweight sums a whole column: its weight element."""
    if output == "dweight" or not index:
        j = index[-1] if index else 0
        return f"w[{j}]={_value(inp.weight[j])}"
    return (f"x[{','.join(map(str, index))}]={_value(inp.x[index])} gate={_value(inp.gate[index])} "
            f"w[{index[-1]}]={_value(inp.weight[index[-1]])} dy={_value(inp.dy[index])}")


def explain(c: Comparison, inp: Inputs, output: str, lo: torch.Tensor, hi: torch.Tensor,
            exact: torch.Tensor, golden: torch.Tensor | None, flats: list[int],
            dtype: torch.dtype) -> list[ElementRecord]:
    """Records of the elements at flat indices `flats` of the comparison `c`."""
    got = c.distance.computed.reshape(-1)
    out = []
    for flat in flats:
        idx = unravel(flat, c.distance.computed.shape)
        g = None if golden is None else golden.reshape(-1)[flat]
        out.append(ElementRecord(
            idx, element_inputs(inp, output, idx), float(got[flat]), bits_hex(got[flat].to(dtype)),
            float(lo.reshape(-1)[flat]), float(hi.reshape(-1)[flat]), float(exact.reshape(-1)[flat]),
            None if g is None else float(g), "" if g is None else bits_hex(g.to(dtype)),
            {name: float(e.reshape(-1)[flat]) for name, e in c.errors.items()}))
    return out


def worst_flats(c: Comparison, top: int) -> list[int]:
    """The check's worst element (what its row names) first, then the next worst in the gated metric."""
    key = c.errors[c.metric].reshape(-1)
    k = min(max(top, 0), key.numel())
    if k == 0:
        return []
    first = c.reduced.worst_flat
    if k == 1:                                      # a sweep's every check: no top-k to sort
        return [first]
    rest = [int(i) for i in torch.topk(key, min(k + 1, key.numel())).indices if int(i) != first]
    return [first] + rest[:k - 1]


def _at(index: tuple[int, ...]) -> str:
    return ",".join(map(str, index))


def reason(output: str, reference: str, f: Finding | None) -> str:
    """A check's reason: what the Finding says, for `output` checked against `reference` (its label)."""
    if f is None:
        return ""
    k = f.kind
    if k == "over_budget":
        return f"{output} {f.metric} error {f.value:.4g} > budget {f.limit:.4g} at [{_at(f.index)}] vs {reference}"
    if k == "nan_reference":
        why = "" if math.isnan(f.other) else (f"{reference} overflows there (an intermediate it rounds went past its "
                                             f"format's range; the exact value is {f.other:.4g}), and ")
        return f"{output} reference is NaN at [{_at(f.index)}]: {why}a NaN never passes"
    if k == "non_finite":
        return f"{output} non-finite ({f.value}) at [{_at(f.index)}] where the reference is finite"
    if k == "not_repeatable":
        if f.text:
            return f"{output} not repeatable: {f.text}"
        first = f" (first at [{_at(f.index)}]: {f.value!r}, then {f.other!r})" if f.index else ""
        return (f"{output} not repeatable: {f.count} elements differ between calls on the same inputs{first}; "
                f"--allow-nondeterministic accepts it")
    if k == "regressed":
        return f"regressed: {f.value:.4g} vs baseline {f.other:.4g} (threshold {f.limit:.4g})"
    return f.text                     # contract, error, skip: the implementation side's own words
