"""An independent float64 autograd version of the gated norm (both orders, groups, both gate
activations — torch's own silu and sigmoid and their autograd derivatives): tests check the
closed forms (references.closed_forms) against it, so the backward formulas are never only checked
against themselves."""
from __future__ import annotations

import torch


def autograd_outputs(inp) -> dict[str, torch.Tensor]:
    x = inp.x.to(torch.float64).clone().requires_grad_(True)
    t = inp.gate.to(torch.float64).clone().requires_grad_(True)
    w = inp.weight.to(torch.float64).clone().requires_grad_(True)
    g = w + 1 if inp.zero_centered_gamma else w
    group = inp.group_size or x.shape[-1]

    def norm(u):
        v = u.reshape(*u.shape[:-1], u.shape[-1] // group, group)
        v = v * torch.rsqrt((v * v).mean(-1, keepdim=True) + inp.eps)
        return v.reshape(u.shape) * g

    act = {"silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid}[inp.activation]
    y = act(t) * norm(x) if inp.norm_before_gate else norm(x * act(t))
    y.backward(inp.dy.to(torch.float64))
    return {"y": y.detach(), "dx": x.grad, "dgate": t.grad, "dweight": w.grad}
