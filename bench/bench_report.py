"""Time a run directory's reports (summary.csv + report.html through harness.reports.outputs) on a
synthetic results frame in the results.csv schema, 50,000 rows by default, with a baseline.
Usage: python bench/bench_report.py [ROWS] [--identify] ; prints the seconds write_outputs took
(wall, and this process's CPU time: on a shared machine the wall time includes waiting).
--identify adds rows against every built-in model, as `harness identify` writes them."""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.reports.outputs import RunData, write_outputs  # noqa: E402
from harness.reports.schema import columns  # noqa: E402
from harness.reports.summary import summarize  # noqa: E402

IMPLS = {"torch_eager": "chain", "fused_kernel": "fused", "triton_like": "fused", "naive": "chain", "te_like": "xhat"}
MODELS = ("chain", "fused", "xhat")
OUTPUTS = ("y", "dx", "dgate", "dweight")
GATES = ("normal", "negative", "saturating", "underflow", "large_positive", "tiny")


def synth(rows: int = 50_000, seed: int = 0, identify: bool = False, cuda: bool = False) -> pd.DataFrame:
    """Rows = cases x impls x outputs x references (exact and the declared model; with `identify`
    every built-in model), with plausible errors, fails, errors, skips, timings and a few
    non-repeatable outputs."""
    rng = np.random.default_rng(seed)
    refs = ["exact", "own"] + (["other1", "other2"] if identify else [])
    per_case = len(IMPLS) * len(OUTPUTS) * len(refs)
    n_cases = -(-rows // per_case)
    case = pd.DataFrame({
        "case_id": [f"{i:012x}" for i in range(n_cases)],
        "dtype": rng.choice(["bf16", "fp16", "fp32"], n_cases),
        "hidden": rng.choice([19, 64, 96, 128, 256, 1024, 4096, 8192], n_cases),
        "tokens": rng.choice([1, 4, 16, 4096], n_cases),
        "gate_dist": rng.choice(GATES, n_cases),
        "regime": rng.choice(["normal", "extreme"], n_cases, p=[0.85, 0.15]),
        "seed": rng.integers(0, 2**31, n_cases),
    })
    impl = pd.DataFrame({"impl": list(IMPLS), "rounding": list(IMPLS.values())})
    d = (case.merge(impl, how="cross").merge(pd.DataFrame({"output": OUTPUTS}), how="cross")
         .merge(pd.DataFrame({"ref_kind": refs}), how="cross").head(rows))
    n = len(d)
    others = {r: [m for m in MODELS if m != r] for r in MODELS}
    model = np.select([d["ref_kind"] == "own", d["ref_kind"] == "other1", d["ref_kind"] == "other2"],
                      [d["rounding"], d["rounding"].map(lambda r: others[r][0]),
                       d["rounding"].map(lambda r: others[r][1])], "")
    d["reference"] = np.where(d["ref_kind"] == "exact", "exact", "model:" + pd.Series(model, index=d.index))
    d["out_dtype"] = d["gate_dtype"] = d["weight_dtype"] = d["act_dtype"] = d["dtype"]
    d["shape"] = d["tokens"].astype(str) + "x" + d["hidden"].astype(str)
    d["label"] = d["dtype"] + " " + d["shape"] + " gate:" + d["gate_dist"]
    d["device"], d["eps"], d["zero_centered_gamma"] = ("cuda" if cuda else "cpu"), 1e-5, False
    d["x_dist"], d["gamma_dist"], d["dy_dist"] = "standard", "one", "normal"
    d["group_size"], d["norm_before_gate"] = d["hidden"], True
    ulp = (d["output"] == "y") | (d["ref_kind"] != "exact")
    d["budget_metric"] = np.where(ulp, "ulp", "scaled")
    d["budget"] = np.where(d["regime"] == "extreme", np.inf, np.where(ulp, 2.0, 8.0))
    off_model = d["ref_kind"].isin(["other1", "other2"]).to_numpy()
    d["max_ulp"] = np.round(rng.gamma(0.7, 0.6, n) * 2) / 2 + off_model * rng.gamma(2.0, 2.0, n)
    d["mean_ulp"] = d["max_ulp"] * rng.uniform(0, 0.3, n)
    d["p99_ulp"] = d["max_ulp"] * 0.8
    d["max_scaled_err"] = rng.gamma(1.2, 1.8, n)
    d["mean_scaled_err"] = d["max_scaled_err"] * 0.1
    d["max_abs_err"] = d["max_rel_err"] = d["max_scaled_err"] * 1e-3
    v = np.where(ulp, d["max_ulp"], d["max_scaled_err"])
    d["status"] = np.where(v <= d["budget"], "pass", "fail")
    d["reason"] = np.where(d["status"] == "fail", d["output"] + " error " + pd.Series(v).round(3).astype(str).values
                           + " > budget " + d["budget"].astype(str), "")
    pair_u = rng.random(n_cases * len(IMPLS))                 # one draw per pair: errors and skips are per pair
    pair_no = (d.index // (len(OUTPUTS) * len(refs))).to_numpy()
    err, skip = pair_u[pair_no] < 0.002, (pair_u[pair_no] > 0.97) & (d["impl"] == "te_like").to_numpy()
    d.loc[err, "status"], d.loc[err, "reason"] = "error", "RuntimeError: boom"
    d.loc[skip, "status"], d.loc[skip, "reason"] = "skip", "te_like: hidden not a multiple of 16"
    unmeasured = err | skip
    d.loc[unmeasured, ["max_ulp", "mean_ulp", "max_scaled_err", "max_abs_err", "max_rel_err"]] = np.nan
    d["worst_index"] = "0," + (d["hidden"] - 1).astype(str)
    d["worst_got"], d["worst_ref"] = 1.25, 1.2499
    d["worst_inputs"] = "x[0,3]=0x3f80 (1) gate=0xbf00 (-0.5) w[3]=0x3f80 (1) dy=0x3c00 (0.0078125)"
    d["replay"] = "harness replay " + d["case_id"] + " --impl " + d["impl"] + " --cases quick --device cpu"
    d["budget_source"], d["suite"] = "default", "synthetic"
    elems = (d["tokens"] * d["hidden"]).to_numpy()
    pair_t = 2e-5 + elems * 1e-9 * (1 + (d["impl"] == "naive").to_numpy() * 3)
    d["impl_seconds"] = np.where(unmeasured, np.nan, pair_t)
    d["pair_seconds"] = pair_t * 40 + 0.01
    if cuda:
        d["bytes_moved"] = np.where(unmeasured, np.nan, elems * 12)
        d["floor_fraction"] = np.where(unmeasured, np.nan, np.clip(elems * 12 / 4.0e12 / pair_t, 0, 1))
    rep = ~((d["impl"] == "triton_like") & (d["output"] == "dweight") & (pair_u[pair_no] < 0.05)).to_numpy()
    d["repeatable"] = np.where(unmeasured, "", np.where(rep, "True", "False"))
    d["differing_elements"] = np.where(unmeasured, np.nan, np.where(rep, 0, d["hidden"]))
    return d.reindex(columns=list(columns()))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = int(args[0]) if args else 50_000
    df = synth(rows, identify="--identify" in sys.argv)
    base = synth(rows, seed=1, identify="--identify" in sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        data = RunData(df, summarize(df), 1, "bench", {"bench": "synthetic"}, base, "synthetic")
        write_outputs(Path(tmp), data)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        size = (Path(tmp) / "report.html").stat().st_size
    print(f"summarize + write_outputs on {len(df):,} rows (with baseline): {dt:.2f} s wall, "
          f"{cpu:.2f} s CPU (this process), report.html {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
