"""Generated inputs (cases/generate.py): exact in their dtypes and deterministic, each
distribution of x, gate and dy where it says, dy in the activation dtype, the variant and the
activation carried to the inputs, and every input pinned bit for bit (golden stores and baselines
are keyed by case id)."""
from __future__ import annotations

import hashlib
import math

import pytest
import torch

from harness.cases.case import DTYPES, DY_DISTS, GAMMA_DISTS, GATE_DISTS, X_DISTS, Case
from harness.cases.generate import generate
from harness.cases.suite import load_suite, parse_suite
from harness.references.formats import fmt_of
from tests.conftest import make_case, needs_cuda

P = "suites/my.toml"


@pytest.mark.parametrize("dtype,gate_dtype,weight_dtype", [
    ("bf16", "bf16", "bf16"), ("fp16", "fp32", "fp16"), ("fp32", "fp32", "fp32"), ("bf16", "fp32", "fp32")])
@pytest.mark.parametrize("x_dist", ["standard", "large", "tiny", "subnormal", "zero_row", "outlier"])
def test_generated_inputs_exact_in_dtype_and_deterministic(dtype, gate_dtype, weight_dtype, x_dist):
    c = make_case(dtype=dtype, gate_dtype=gate_dtype, weight_dtype=weight_dtype, x_dist=x_dist,
              gamma_dist="outlier")
    a, b = generate(c), generate(c)
    for name, t, fmtname in (("x", a.x, dtype), ("gate", a.gate, gate_dtype), ("weight", a.weight, weight_dtype),
                             ("dy", a.dy, dtype)):
        f = fmt_of(fmtname)
        assert t.dtype == f.dtype, name
        assert torch.equal(t.double().to(f.dtype), t), name
        assert torch.isfinite(t.double()).all(), name
    for t1, t2 in ((a.x, b.x), (a.gate, b.gate), (a.weight, b.weight), (a.dy, b.dy)):
        assert torch.equal(t1, t2)
    assert a.eps == c.eps and a.zero_centered_gamma == c.zero_centered_gamma
    other = Case(**{**c.params(), "shape": c.shape, "seed": 1})
    assert not torch.equal(generate(other).x, a.x)


def test_dy_follows_activation_dtype():
    c = make_case(weight_dtype="fp32")
    assert generate(c).dy.dtype == torch.bfloat16
    assert generate(c, act_follows="weight").dy.dtype == torch.float32


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_gate_distributions(dtype):
    g = {d: generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=(8, 96), gate_dist=d)).gate.double()
         for d in ("saturating", "underflow", "negative", "large_positive", "tiny")}
    assert ((g["saturating"] >= -87) & (g["saturating"] <= -20)).all()
    assert (g["underflow"] < -87).all()
    assert (g["negative"] <= 0).all() and (g["negative"] < 0).any()
    assert (g["large_positive"] >= 8).all()
    assert (g["tiny"].abs() < 0.1).all()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("shape", [(4, 32), (32,), (2, 3, 16)])
def test_zero_row(dtype, shape):
    x = generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=shape, x_dist="zero_row")).x
    rows = x.reshape(-1, shape[-1])
    assert (rows[0] == 0).all()
    if rows.shape[0] > 1:
        assert (rows[1:] != 0).any()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_large_x(dtype):
    x = generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=(4, 128), x_dist="large")).x.double()
    assert ((x.abs() >= 128) & (x.abs() <= 256)).all()


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_subnormal_x(dtype):
    f = fmt_of(dtype)
    x = generate(make_case(dtype=dtype, gate_dtype=dtype, weight_dtype=dtype, shape=(4, 128), x_dist="subnormal")).x.double()
    assert (x.abs() < 2.0 ** f.emin).all()
    assert (x != 0).any()


def test_subnormal_x_bf16_stays_subnormal():
    f = fmt_of("bf16")
    x = generate(make_case(shape=(4, 128), x_dist="subnormal")).x.double()
    assert (x.abs() < 2.0 ** f.emin).all()


@pytest.mark.parametrize("dist", ["normal", "ones", "positive"])
def test_dy_distributions(dist):
    inp = generate(make_case(shape=(64, 32), dy_dist=dist))
    dy = inp.dy.double()
    if dist == "ones":
        assert torch.all(dy == 1)
    elif dist == "positive":
        assert torch.all(dy >= 0) and dy.std() > 0.1
    else:
        assert (dy < 0).any() and (dy > 0).any()
    assert inp.group_size is None and inp.norm_before_gate


def test_generated_inputs_carry_the_variant():
    inp = generate(make_case(shape=(4, 32), group_size=8, norm_before_gate=False))
    assert inp.group == 8 and inp.norm_before_gate is False and inp.op.group_size == 8


def test_the_activation_axis_reaches_inputs_and_suites():
    s = parse_suite('[[group]]\ndtype = ["bf16"]\nshape = [[4, 32]]\nactivation = ["silu", "sigmoid"]\n', P)
    assert [c.activation for c in s.cases] == ["silu", "sigmoid"]
    inp = generate(s.cases[1])
    assert inp.activation == "sigmoid" and inp.op.activation == "sigmoid"
    assert generate(s.cases[0]).op.activation == "silu"
    assert {c.activation for c in load_suite("quick").cases} == {"silu", "sigmoid"}
    full = load_suite("full").cases
    sig = [c for c in full if c.activation == "sigmoid"]
    assert {c.norm_before_gate for c in sig} == {True, False} and len({c.group for c in sig}) > 2
    assert {c.dtype for c in sig} == {"bf16", "fp16", "fp32"} and any(c.gate_dtype != c.dtype for c in sig)
    assert {c.gate_dist for c in sig} == {"normal", "negative", "saturating", "underflow", "large_positive", "tiny"}


def pinned_cases() -> list[tuple[Case, str]]:
    """Every x, gate, gamma and dy distribution in every dtype, 1- to 3-D, zero-centred or not, and
    a mixed-dtype case with dy in the weight dtype: (case, act_follows)."""
    out, shapes = [], [(3, 64), (2, 3, 96), (160,)]
    for i in range(18):
        dt = DTYPES[i // 6]
        out.append((Case(dtype=dt, gate_dtype=dt, weight_dtype=dt, shape=shapes[i % 3], zero_centered_gamma=bool(i // 3 % 2),
                         eps=1e-5, x_dist=X_DISTS[i % 6], gate_dist=GATE_DISTS[(i + i // 6) % 6],
                         gamma_dist=GAMMA_DISTS[i % 3], seed=i, dy_dist=DY_DISTS[i // 2 % 3]), "x"))
    out.append((Case(dtype="bf16", gate_dtype="fp16", weight_dtype="fp32", shape=(4, 64), zero_centered_gamma=False,
                     eps=1e-6, x_dist="outlier", gate_dist="normal", gamma_dist="outlier", seed=7), "weight"))
    return out


# sha256 of the generated x, gate, weight, dy (dtype, shape, bytes), computed with generate as of
# e4ccc0d: golden stores and baselines are keyed by case id, so a case's inputs never change.
PINNED_INPUTS = {
    "33c3eade419a": "eb51319e8251e6ad", "b86aafa47ef8": "5766bfd4585c9d33", "50d52924a658": "99fa21d5b3d5ee91",
    "029da4218c53": "be0977cd9bbc90df", "da4401e00c8c": "cff54e793b84961d", "9b617dee05b0": "30b3a05401f64747",
    "3a042cbfba32": "2d681c58f341afb7", "7be8940430e1": "67eab4100e353283", "f1753d2c02ab": "4689a303cbce9067",
    "480372394159": "d76e60f6c1c027f9", "6cb51787ad3e": "7b37dfb171a85f49", "a36adb8c86af": "dc05e419190d3ac1",
    "a69fb3c4e739": "4bf814306f9ec653", "e00c2f1087cf": "8a34bb730e2b3814", "844323ade520": "06ca50d4664dfe6c",
    "06f1fb846472": "1d2a4dfdf52a0794", "11d376ead167": "e8a4566a433aa2e9", "f487b6d7bfcd": "d3401a575f7b381d",
    "fc9b6f46078d/weight": "bfd5676aaa67a1e2",
}


def inputs_digest(inp) -> str:
    h = hashlib.sha256()
    for t in (inp.x, inp.gate, inp.weight, inp.dy):
        h.update(f"{t.dtype} {tuple(t.shape)}".encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def test_generated_inputs_are_pinned():
    got = {c.case_id + ("" if follows == "x" else "/" + follows): inputs_digest(generate(c, follows))
           for c, follows in pinned_cases()}
    assert got == PINNED_INPUTS


def _hard_values(fmt) -> torch.Tensor:
    """float64 values where rounding into `fmt` is hardest: every tie between neighbours near 1 and
    in the subnormal range, a float64 ulp either side of each, the overflow threshold, specials."""
    p, sub = fmt.precision, fmt.min_subnormal
    k = torch.arange(1, 200, dtype=torch.float64)
    top = 2.0 ** (math.frexp(fmt.max)[1] - p)            # ulp(max): max + top / 2 rounds to inf
    ties = torch.cat([1 + (k[k < 2 ** (p - 1)] + 0.5) * 2.0 ** (1 - p), (k + 0.5) * sub, fmt.max + (k - 100) * top / 2])
    up, down = torch.nextafter(ties, ties + 1), torch.nextafter(ties, ties - 1)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 2.0 ** -1074, 1e300])
    v = torch.cat([ties, up, down, special])
    v = torch.cat([v, -v])
    bits = v.view(torch.int64).clone()
    bits[-1] = 0x7FF0000000000123                        # a NaN with a payload
    return torch.cat([bits.view(torch.float64), torch.randn(1 << 16, dtype=torch.float64) * 4])


@needs_cuda
@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_rounding_on_cuda_gives_the_cpus_bits(name, monkeypatch):
    """The rounding of a big draw moves to the GPU (generate's `device`): the same bits as the CPU's,
    on the hardest values (NaN aside), and for whole cases of every distribution."""
    from harness.cases import generate as gen
    fmt = fmt_of(name)
    v = _hard_values(fmt)
    cpu, cuda = gen.to_dtype_exact(v, fmt), gen.to_dtype_exact(v.cuda(), fmt).cpu()
    nan = v.isnan()             # a NaN's 16 bits are each device's conversion's (a draw has none)
    assert torch.equal(cpu[nan].isnan(), cuda[nan].isnan()) and cpu[nan].isnan().all()
    assert torch.equal(cpu[~nan].view(torch.int16), cuda[~nan].view(torch.int16))
    torch.empty(1, device="cuda")                          # CUDA up, as in a pair's process
    seen = []
    real = gen.to_dtype_exact
    monkeypatch.setattr(gen, "to_dtype_exact", lambda t, f: seen.append(t.device.type) or real(t, f))
    shape = (64, gen.ROUND_ON_DEVICE_FROM // 64)
    for x_dist, gate_dist, dy_dist in zip(X_DISTS, GATE_DISTS, DY_DISTS * 2):
        c = make_case(dtype=name, gate_dtype=name, weight_dtype=name, shape=shape, x_dist=x_dist,
                      gate_dist=gate_dist, dy_dist=dy_dist)
        seen.clear()
        on_gpu = generate(c, device="cuda")
        assert seen == ["cuda", "cuda", "cpu", "cuda"]          # x, gate, the weight (small), dy
        on_cpu = generate(c)
        for k in ("x", "gate", "weight", "dy"):
            a, b = getattr(on_gpu, k), getattr(on_cpu, k)
            assert a.device.type == "cpu" and torch.equal(a.view(torch.int16), b.view(torch.int16)), (x_dist, k)
