"""`harness budgets show`: the default budgets of every built-in model (harness.derivation)."""
from harness.cli import main
from harness.references.exact import OUTPUTS


def test_budgets_show(capsys):
    assert main(["budgets", "show"]) == 0
    out = capsys.readouterr().out
    for output in OUTPUTS:
        assert f" {output} " in out
    for word in ("chain", "fused", "xhat", "norm first", "gate first", "exact", "model", "u_a(mid)",
                 "u_p(xhat)", "rho_n", "rho_sum"):
        assert word in out, word
    assert "1 + (u_a(mid))/u_o + (rho_n + rho_gate) u32/u_o" in out
    assert "0.5 + (rho_n + rho_gate) u32/u_o" in out           # fused y against the exact value
