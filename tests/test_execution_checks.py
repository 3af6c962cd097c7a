"""What running an implementation checks (harness.pipeline.call and judge): a factory or forward that
raises, a module without a `weight` or with one of the wrong shape, outputs of the wrong dtype or
shape, a missing gradient, NaN where the reference is finite: each an error or fail row naming it."""
from __future__ import annotations

from harness.impls import registry
from tests.conftest import checked, make_case, write_module


def problems(rec) -> dict:
    return {k: f.text for k, f in rec.problems.items()}


# ---------------------------------------------------------------- execution problems

def test_factory_raises(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, "def make(h, **kw):\n    raise ValueError('no such size')\n")
    impl = registry.load_plugin(f"p={mod}:make")
    rec, rows = checked(impl, make_case())
    assert rec.status == "error" and rec.text == "factory raised ValueError: no such size"
    assert len(rows) == 10 and {r["status"] for r in rows} == {"error"}
    assert {r["reason"] for r in rows} == {"factory raised ValueError: no such size"}


def test_module_without_weight(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        class M(torch.nn.Module):
            def forward(self, x, gate):
                return x * gate
        def make(h, **kw):
            return M()
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert rec.status == "error" and rec.text == "module has no `weight` parameter"
    assert {r["status"] for r in rows} == {"error"}


def test_weight_wrong_shape(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        class M(torch.nn.Module):
            def __init__(self, h, dtype):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(h + 1, dtype=dtype))
            def forward(self, x, gate):
                return x * gate
        def make(h, *, dtype, **kw):
            return M(h, dtype)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert rec.status == "error" and rec.text == "weight shape (33,), expected (32,)"


def test_raises_in_forward(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                raise RuntimeError("kernel launch failed")
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert rec.status == "error" and rec.text == "forward/backward raised RuntimeError: kernel launch failed"
    assert {r["status"] for r in rows} == {"error"}


GATE_CAST = """
import torch
from harness.impls.torch_ref import GatedRMSNorm
class M(GatedRMSNorm):
    def forward(self, x, gate):
        gate.data = gate.data.to(x.dtype)       # casts the gate (leaf) to x's dtype before use
        return super().forward(x, gate)
def make(h, *, eps, zero_centered_gamma, dtype, device):
    return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""


def test_wrong_dgate_dtype_is_a_fail_row(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, GATE_CAST)
    case = make_case(gate_dtype="fp32")
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), case)
    assert rec.status == "ran"
    assert problems(rec) == {"dgate": "dgate dtype bfloat16, expected float32"}
    dg = [r for r in rows if r["output"] == "dgate"]
    assert len(dg) == 2 and all(r["status"] == "fail" for r in dg)
    assert {r["reason"] for r in dg} == {"dgate dtype bfloat16, expected float32"}
    others = [r for r in rows if r["output"] != "dgate"]
    assert len(others) == 8 and all(r["status"] in ("pass", "fail") for r in others)


def test_wrong_y_dtype_is_a_fail_row(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                return super().forward(x, gate).float()
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert problems(rec) == {"y": "y dtype float32, expected bfloat16",
                             "y_infer": "under torch.inference_mode(): y dtype float32, expected bfloat16"}
    y = [r for r in rows if r["output"] == "y"]
    assert {r["status"] for r in y} == {"fail"} and {r["reason"] for r in y} == {problems(rec)["y"]}


def test_missing_gradient_is_a_fail_row(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        import torch.nn.functional as F
        class M(torch.nn.Module):
            def __init__(self, h, dtype):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(h, dtype=dtype))
            def forward(self, x, gate):           # ignores the weight: no dweight
                return (x.float() * F.silu(gate.float())).to(x.dtype)
        def make(h, *, dtype, **kw):
            return M(h, dtype)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert problems(rec)["dweight"] == "gradient missing (None)"
    dw = [r for r in rows if r["output"] == "dweight"]
    assert {r["status"] for r in dw} == {"fail"}


WRONG_SHAPE = """
import torch
from harness.impls.torch_ref import GatedRMSNorm
class M(GatedRMSNorm):
    def forward(self, x, gate):
        return super().forward(x, gate).reshape(-1)
def make(h, *, eps, zero_centered_gamma, dtype, device):
    return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""


def test_wrong_y_shape_outcome(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, WRONG_SHAPE)
    impl = registry.load_plugin(f"p={mod}:make")
    rec, _ = checked(impl, make_case())
    assert rec.status == "ran"
    assert set(problems(rec).values()) == {"y shape (128,), expected (4, 32)"} and len(rec.problems) == 5


def test_wrong_y_shape_gives_fail_rows(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, WRONG_SHAPE)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert len(rows) == 10 and {r["status"] for r in rows} == {"fail"}
    assert {r["reason"] for r in rows} == {"y shape (128,), expected (4, 32)"}


def test_a_forward_returning_nothing_is_named_as_such(tmp_path, monkeypatch):
    """y None is the forward's failure, said so in every row (not a missing gradient)."""
    mod = write_module(tmp_path, monkeypatch, """
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                super().forward(x, gate)
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    assert len(rows) == 10 and {r["status"] for r in rows} == {"fail"}
    assert {r["reason"] for r in rows} == {"y is None, expected a tensor"}


def test_nan_output_where_reference_finite_fails(tmp_path, monkeypatch):
    mod = write_module(tmp_path, monkeypatch, """
        import torch
        from harness.impls.torch_ref import GatedRMSNorm
        class M(GatedRMSNorm):
            def forward(self, x, gate):
                y = super().forward(x, gate)
                mask = torch.zeros_like(y, dtype=torch.bool)
                mask.view(-1)[5] = True
                return torch.where(mask, torch.full_like(y, float("nan")), y)
        def make(h, *, eps, zero_centered_gamma, dtype, device):
            return M(h, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
    """)
    rec, rows = checked(registry.load_plugin(f"p={mod}:make"), make_case())
    y = [r for r in rows if r["output"] == "y"]
    assert len(y) == 2
    for r in y:
        assert r["status"] == "fail" and "non-finite" in r["reason"] and "nan" in r["reason"]
        assert r["worst_index"] == "0,5" and r["count_over"] >= 1
