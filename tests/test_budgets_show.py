"""`harness budgets show`: the default budget derivation table (harness.budgets.derivation_table)."""
from harness.budgets import METRIC
from harness.cli import main


def test_budgets_show(capsys):
    assert main(["budgets", "show"]) == 0
    out = capsys.readouterr().out
    for output in METRIC:
        assert f" {output} " in out
    for word in ("chain", "fused", "exact", "model", "normal", "extreme", "u_a/u_o", "rho_n"):
        assert word in out
    assert "0.5 + u_a/u_o (n rounded) + (rho_n + rho_y)/u_o ulp" in out
