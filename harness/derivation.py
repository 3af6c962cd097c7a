"""`harness budgets show`: the default budgets of every built-in rounding model, as the formulas
harness.budgets derives them from and their values for bf16 at one size (docs/budgets.md)."""
from __future__ import annotations

from harness.budgets import default_budget
from harness.references.exact import OUTPUTS
from harness.references.formats import fmt_of
from harness.references.metrics import gated_metric, get
from harness.references.models import POINT_TERMS, builtin_models
from harness.references.models.noise import EXACT_PATH


def _noise(output: str, nbg: bool) -> str:
    """EXACT_PATH's terms as text: "rho_n + rho_gate", "5 rho_gate + rho_n + ..."."""
    return " + ".join(f"{k} rho_{t}" if k != 1 else f"rho_{t}" for t, k in EXACT_PATH[nbg][output].items())


def _terms(points, output: str, nbg: bool) -> str:
    parts = []
    for p in sorted(points):
        for f, k in POINT_TERMS[(p, nbg)][output].items():
            parts.append(f"{k if k != 1 else ''}u_{'a' if f == 'act' else 'p'}({p})")
    return " + ".join(parts)


def derivation_table(group: int = 4096, tokens: int = 4096) -> str:
    bf16 = fmt_of("bf16")
    head = ("model", "order", "reference", "output", "metric", "formula", f"bf16 G={group} T={tokens}")
    rows = []
    for model in builtin_models().values():
        for nbg in (True, False):
            for reference in ("model", "exact"):
                for output in OUTPUTS:
                    metric = gated_metric(output, reference)
                    final = get(metric).final_rounding
                    if reference == "model":
                        formula = f"{final:g}  (the final rounding; the interval holds the float32 noise)"
                    else:
                        terms = _terms(model.points, output, nbg)
                        first = f"{2 * final:g}" if terms and metric == "ulp" else f"{final:g}"
                        formula = " + ".join(x for x in (first, f"({terms})/u_o" if terms else "",
                                                          f"({_noise(output, nbg)}) u32/u_o") if x)
                    b = default_budget(output, reference, model, bf16, bf16, bf16, group, tokens, nbg)
                    rows.append((model.name, "norm first" if nbg else "gate first", reference, output, metric,
                                 formula, f"{b.value:.6g}"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:{w}s}}" for w in widths)
    lines = [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r).rstrip() for r in rows]
    lines += [
        "",
        "u_o = 2^-p of the output's format (bf16 2^-8, fp16 2^-11, fp32 2^-24); u_a the activation format's,",
        "u_p the promoted gamma product's (promote(weight, activation)); u32 = 2^-24. float32 noise, in u32",
        "relative to each output's gauge (G channels a group, T tokens): rho_n = 6 + log2 G + sqrt G,",
        "rho_gate = 8, rho_dgate = 12, rho_bwd = 4 + log2 G + sqrt G, rho_sum = 4 + log2 T + sqrt T (the accurate",
        "math class, shown above). The fast class adds 8 to rho_n and 4 to rho_bwd (approximate sqrt and division),",
        "and per element at the gate steps a sigmoid error (1.25 |t| + 5)(1 - s) + 4 u32 (exp as ex2.approx of the",
        "float32-rounded t log2 e), which widens the exact value; +ftz lets float32 subnormals be 0.",
        "The same budgets hold for a sigmoid gate (activation = sigmoid): its steps are silu's without the product",
        "by t; the absolute error its 1 - s carries (4 u32 s |d u|) widens the references per element.",
        "Against the exact value a ULP budget's final rounding is 1, not 0.5, where declared roundings can carry",
        "y across a power of two. Extreme regime (x large/tiny/subnormal, gates below -20, eps >= 0.1): the exact",
        "errors are reported (budget inf), the model reference gates. Overrides: --budgets FILE. docs/budgets.md.",
    ]
    return "\n".join(lines)
