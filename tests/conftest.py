import torch
import pytest

from harness.cases.case import Case
from harness.references.exact import Inputs


def make_case(**kw) -> Case:
    """A bf16 4x32 case of the default distributions, with `kw` overriding any field."""
    base = dict(dtype="bf16", gate_dtype="bf16", weight_dtype="bf16", shape=(4, 32),
                zero_centered_gamma=False, eps=1e-5, x_dist="standard", gate_dist="normal",
                gamma_dist="one", seed=0)
    base.update(kw)
    return Case(**base)


def make_inputs(shape, dtype=torch.bfloat16, zc=False, gate_scale=3.0, gate_shift=0.0, seed=0,
                eps=1e-5, gate_dtype=None, weight_dtype=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    gate = (gate_shift + gate_scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(gate_dtype or dtype)
    base = 0.0 if zc else 1.0
    w = (base + 0.1 * torch.randn(shape[-1], generator=g, dtype=torch.float64)).to(weight_dtype or dtype)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return Inputs(x, gate, w, dy, eps, zc)


@pytest.fixture
def inputs_factory():
    return make_inputs


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
