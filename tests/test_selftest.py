"""The harness's own sensitivity (harness/selftest.py): every mutant — the field's bugs among them —
caught with the output and case named, every correct eager built-in passing, on a compact suite
(`harness selftest` runs quick; test_cli-style CPU time is kept small here)."""
import pytest
import torch

from harness import mutants
from harness.mutants import MUTANTS
from harness.selftest import format_selftest, selftest

SUITE = """
name = "selftest-compact"
[[group]]
dtype = ["bf16", "fp16"]
shape = [[4, 19]]
zero_centered_gamma = [false, true]
[[group]]
dtype = ["bf16"]
gate_dtype = ["fp32"]
weight_dtype = ["fp32"]
shape = [[16, 64]]
zero_centered_gamma = [true]
[[group]]
dtype = ["bf16"]
shape = [[8, 64]]
group_size = [16]
norm_before_gate = [true, false]
[[group]]
dtype = ["bf16"]
shape = [[512, 32]]
dy_dist = ["ones"]
[[group]]   # the sigmoid gate, both orders
dtype = ["bf16"]
shape = [[8, 64]]
activation = ["sigmoid"]
norm_before_gate = [true, false]
[[case]]    # a float32 output next to saturating gates: tells the math classes apart
dtype = "fp32"
shape = [8, 64]
gate_dist = "saturating"
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("selftest")
    (d / "s.toml").write_text(SUITE)
    return selftest(str(d / "s.toml"), "cpu", d / "out",
                    correct=["torch", "torch-fused", "torch-xhat", "torch-fastmath", "torch-fastmath-ftz"])


def test_every_mutant_caught_and_every_correct_builtin_passes(report):
    assert set(MUTANTS) <= set(report.report)
    for name, (kind, ok, detail, bug) in report.report.items():
        assert ok, f"{name} ({kind}): {detail}"
        if kind == "mutant":
            assert " vs " in detail and " on " in detail      # names the output, reference and case
            assert bug                                       # says what is wrong
    assert report.ok


def test_an_inductor_emulation_is_a_control_on_the_cpu_only():
    """On CUDA its model is Inductor's to keep (the H200's torch 2.11 drops the casts): no control there."""
    from harness.selftest import correct_builtins
    assert "torch-compile-emulate" in correct_builtins("cpu")
    cuda = correct_builtins("cuda")
    assert "torch-compile-emulate" not in cuda and {"torch", "torch-fused", "torch-xhat"} <= set(cuda)


def test_field_mutants_cite_their_source():
    for name in ("eps-outside-sqrt", "variance-bf16-accumulator", "zc-ignored-gamma-twice", "one-plus-w-in-bf16",
                 "fla-dgate-in-x-dtype", "returns-fp32", "dweight-garbage-few-rows", *FIELD):
        assert any(k in MUTANTS[name].__doc__ for k in ("#", "fused_norm_gate")), name


def test_format(report):
    text = format_selftest(report)
    assert "PASS caught" in text and "PASS passes" in text and "FAIL" not in text


# Issue 28's field bugs: each fails the outputs and cases its bug reaches, and no other (a mutant
# caught for a reason that is not its bug would prove nothing about the harness).
FIELD = ("vllm-native-fp32", "mamba-simple-one-group", "mamba-tp-global-ngroups", "liger-dweight-block-bf16",
         "fla-dx-is-dz", "zc-plus-one-in-weight-dtype", "inference-path-silu-in-bf16")


def bad_rows(report, name):
    """(the rows of the cases the mutant ran — the field mutants decline the sigmoid gate —, those
    that did not pass)."""
    rows = report.results[(report.results["impl"] == name) & (report.results["status"] != "skip")]
    return rows, rows[rows["status"] != "pass"]


def test_field_mutants_fail_where_their_bug_is(report):
    rows, bad = bad_rows(report, "vllm-native-fp32")      # y's dtype, on every 16-bit case
    assert set(bad["output"]) == {"y", "y_infer"} and bad["reason"].str.contains("y dtype float32, expected").all()
    assert set(bad["case_id"]) == set(rows[rows["dtype"].isin(["bf16", "fp16"])]["case_id"])
    rows, bad = bad_rows(report, "mamba-simple-one-group")  # every output, the grouped cases only
    assert set(bad["output"]) == {"y", "y_infer", "dx", "dgate", "dweight"}
    assert set(bad["case_id"]) == set(rows[rows["label"].str.contains(" G=")]["case_id"])
    rows, bad = bad_rows(report, "mamba-tp-global-ngroups")  # every case: one group becomes two
    assert set(bad["case_id"]) == set(rows["case_id"]) and (bad[bad["status"] == "fail"]["output"] == "y").any()
    rows, bad = bad_rows(report, "liger-dweight-block-bf16")  # dweight alone
    assert set(bad["output"]) == {"dweight"} and (bad["status"] == "fail").all()
    rows, bad = bad_rows(report, "fla-dx-is-dz")              # dx alone (2-D inputs); dgate itself is right
    assert set(bad["output"]) == {"dx"} and (bad["status"] == "fail").all()
    rows, bad = bad_rows(report, "zc-plus-one-in-weight-dtype")  # zero-centred gamma with a 16-bit weight
    assert len(bad) and bad["zero_centered_gamma"].all() and (bad["weight_dtype"] != "fp32").all()
    assert "dweight" not in set(bad["output"])                 # w + 1 passes dweight through unchanged


def test_inference_path_mutant_fails_y_infer_alone(report):
    """Right while autograd records, SiLU in bf16 without grad: the training path's y passes and the
    inference path's y_infer is over budget — and only y_infer."""
    rows, bad = bad_rows(report, "inference-path-silu-in-bf16")
    assert len(bad) and set(bad["output"]) == {"y_infer"} and set(bad["fail_kind"]) == {"over_budget"}
    assert (rows[rows["output"] == "y"]["status"] == "pass").all()


def test_liger_block_sum_rounds_inside_blocks_of_16_rows():
    """1 + 2^-8 + 2^-8 in one block: each bf16 partial ties back to 1 (round to even), where float32
    gives 1 + 2^-7; the same terms in three blocks are added in float32, then rounded once."""
    w = torch.ones(1, dtype=torch.bfloat16, requires_grad=True)

    def dweight(rows_at):
        grad = torch.zeros(48, 1)
        grad[list(rows_at)] = torch.tensor([[1.0], [2.0 ** -8], [2.0 ** -8]])
        mutants._LigerBlockSumInBf16.apply(w, 48).backward(grad)
        g, w.grad = w.grad.item(), None
        return g
    assert dweight((0, 1, 2)) == 1.0
    assert dweight((0, 16, 32)) == 1 + 2.0 ** -7


def test_fla_dx_is_dz_as_fla_before_its_fix():
    """dx gets the gate's gradient (cast to x's dtype); for 3-D inputs autograd rejects the flat dz."""
    make = MUTANTS["fla-dx-is-dz"]
    m = make(8, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32, device="cpu")
    x = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    gate = torch.randn(4, 8, requires_grad=True)
    m(x, gate).sum().backward()
    assert x.grad.dtype == torch.bfloat16 and torch.equal(x.grad, gate.grad.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="invalid gradient"):
        m(x.detach().reshape(2, 2, 8).requires_grad_(), gate.detach().reshape(2, 2, 8).requires_grad_()).sum().backward()


@pytest.mark.parametrize("group_size,local", [(16, 8), (None, 32), (32, 16), (1, 0)])
def test_mamba_tp_group_size_is_local_width_over_global_ngroups(group_size, local):
    m = MUTANTS["mamba-tp-global-ngroups"](64, eps=1e-5, zero_centered_gamma=False, dtype=torch.float32,
                                           device="cpu", group_size=group_size)
    assert m.group_size == local
