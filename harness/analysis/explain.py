"""Explain, the second half of a check: the record of one element of a comparison, down to the bit —
its inputs (decimal and hex), what the implementation computed, the exact value, the certified
correctly rounded value, the reference interval, and every metric. Built only where asked for (a
check's worst element; `harness replay`'s top elements), returned as data for the reports and the
CLI to format."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.analysis.compare import Comparison, unravel
from harness.references.exact import Inputs
from harness.references.formats import bits_hex


def _value(t: torch.Tensor) -> str:
    return f"{bits_hex(t)} ({float(t):.9g})"


def element_inputs(inp: Inputs, output: str, index: tuple[int, ...]) -> str:
    """The inputs behind one element of `output`; dweight sums a whole column: its weight element."""
    if output == "dweight" or not index:
        j = index[-1] if index else 0
        return f"w[{j}]={_value(inp.weight[j])}"
    return (f"x[{','.join(map(str, index))}]={_value(inp.x[index])} gate={_value(inp.gate[index])} "
            f"w[{index[-1]}]={_value(inp.weight[index[-1]])} dy={_value(inp.dy[index])}")


@dataclass(frozen=True)
class ElementRecord:
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
    rest = [int(i) for i in torch.topk(key, min(k + 1, key.numel())).indices if int(i) != first]
    return [first] + rest[:k - 1]
