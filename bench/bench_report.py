"""Time summary.csv + report.html on a synthetic 50,000-row results frame (schema columns).
Usage: python bench/bench_report.py [ROWS] ; prints the seconds write_all took."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.reports.html import write_all  # noqa: E402
from harness.reports.schema import COLUMNS  # noqa: E402

IMPLS = {"torch_eager": "fp32", "fused_chain": "chain", "triton_like": "fp32", "naive": "chain", "te_like": "fp32"}
OUTPUTS = ("y", "dx", "dgate", "dweight")
GATES = ("normal", "negative", "saturating", "underflow", "large_positive", "tiny")


def synth(rows: int = 50_000, seed: int = 0) -> pd.DataFrame:
    """Rows = cases x impls x outputs x 2 references, with plausible errors, fails and errors."""
    rng = np.random.default_rng(seed)
    per_case = len(IMPLS) * len(OUTPUTS) * 2
    n_cases = -(-rows // per_case)
    case = pd.DataFrame({
        "case_id": [f"c{i:05d}" for i in range(n_cases)],
        "dtype": rng.choice(["bf16", "fp16", "fp32"], n_cases),
        "hidden": rng.choice([19, 64, 96, 128, 256, 1024, 4096, 8192], n_cases),
        "tokens": rng.choice([1, 4, 16, 4096], n_cases),
        "gate_dist": rng.choice(GATES, n_cases),
        "seed": rng.integers(0, 2**31, n_cases),
    })
    impl = pd.DataFrame({"impl": list(IMPLS), "rounding": list(IMPLS.values())})
    out = pd.DataFrame({"output": OUTPUTS})
    ref = pd.DataFrame({"ref_kind": ["exact", "model"]})
    d = case.merge(impl, how="cross").merge(out, how="cross").merge(ref, how="cross").head(rows)
    n = len(d)
    d["reference"] = np.where(d["ref_kind"] == "exact", "exact", "model:" + d["rounding"])
    d["out_dtype"] = d["dtype"]
    d["gate_dtype"] = d["weight_dtype"] = d["act_dtype"] = d["dtype"]
    d["shape"] = d["tokens"].astype(str) + "x" + d["hidden"].astype(str)
    d["label"] = d["dtype"] + " " + d["shape"] + " gate:" + d["gate_dist"]
    d["device"], d["eps"], d["zero_centered_gamma"] = "cpu", 1e-6, False
    d["x_dist"], d["gamma_dist"], d["regime"] = "normal", "normal", "normal"
    ulp = d["output"] == "y"
    d["budget_metric"] = np.where(ulp, "ulp", "scaled")
    d["budget"] = np.where(ulp, 2.0, 8.0)
    d["max_ulp"] = np.round(rng.gamma(0.7, 0.6, n) * 2) / 2
    d["mean_ulp"] = d["max_ulp"] * rng.uniform(0, 0.3, n)
    d["p99_ulp"] = d["max_ulp"] * 0.8
    d["max_scaled_err"] = rng.gamma(1.2, 1.8, n)
    d["mean_scaled_err"] = d["max_scaled_err"] * 0.1
    d["max_abs_err"] = d["max_scaled_err"] * 1e-3
    d["max_rel_err"] = d["max_scaled_err"] * 1e-3
    v = np.where(ulp, d["max_ulp"], d["max_scaled_err"])
    d["status"] = np.where(v <= d["budget"], "pass", "fail")
    err = rng.random(n) < 0.002
    d.loc[err, "status"] = "error"
    d.loc[err, ["max_ulp", "mean_ulp", "max_scaled_err"]] = np.nan
    d["reason"] = np.where(d["status"] == "fail", d["output"] + " error over budget",
                           np.where(err, "RuntimeError: boom", ""))
    d["worst_index"] = "0," + (d["hidden"] - 1).astype(str)
    d["worst_got"], d["worst_ref"] = 1.25, 1.2499
    d["worst_inputs"] = "x[0, 3]=0x3f80 gate=0xbf00 w[3]=0x3f80 dy=0x3c00"
    d["replay"] = "harness replay " + d["case_id"] + " --impl " + d["impl"] + " --cases quick"
    d["budget_source"] = "default"
    return d.reindex(columns=list(COLUMNS))


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    df = synth(rows)
    base = synth(rows, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_all(Path(tmp), df, baseline=base, env={"bench": "synthetic"}, exit_code=1, title="bench")
        dt = time.perf_counter() - t0
        size = (Path(tmp) / "report.html").stat().st_size
    print(f"write_all on {len(df):,} rows (with baseline): {dt:.2f} s, report.html {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
