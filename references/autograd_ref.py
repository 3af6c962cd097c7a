"""float64 autograd version of the op chain: used only to cross-check the closed forms in tests."""
from __future__ import annotations

import torch

from harness.references.exact import Inputs


def autograd_outputs(inp: Inputs) -> dict[str, torch.Tensor]:
    x = inp.x.to(torch.float64).clone().requires_grad_(True)
    t = inp.gate.to(torch.float64).clone().requires_grad_(True)
    w = inp.weight.to(torch.float64).clone().requires_grad_(True)
    g = w + 1 if inp.zero_centered_gamma else w
    n = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + inp.eps) * g
    y = n * (t * torch.sigmoid(t))
    y.backward(inp.dy.to(torch.float64))
    return {"y": y.detach(), "dx": x.grad, "dgate": t.grad, "dweight": w.grad}
