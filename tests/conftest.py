import torch
import pytest

from references.exact import Inputs


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
