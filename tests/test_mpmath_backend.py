"""mpmath's integer backend (gmpy2, a dependency, or pure Python) changes how fast certification
runs, never what it certifies. mpmath picks the backend once, at import (MPMATH_NOGMPY=1 forces
pure Python), so each backend runs in a process of its own."""
import json
import os
import subprocess
import sys

# A small fp32 case with groups of one channel, gate first: many outputs sit on or near a rounding
# midpoint, so float64 leaves dx and dgate elements undecided and mpmath decides them.
CERTIFY_ONE_CASE = r"""
import hashlib, json, mpmath, torch
from harness.cases.case import Case
from harness.cases.generate import generate
from harness.environment import environment
from harness.references.certify import certify
from harness.references.formats import fmt_of
case = Case(dtype="fp32", gate_dtype="fp32", weight_dtype="fp32", shape=(4, 64), zero_centered_gamma=False,
            eps=1e-5, x_dist="standard", gate_dist="normal", gamma_dist="one", seed=0, group_size=1,
            norm_before_gate=False)
inp, out = generate(case), {}
for output in ("y", "dx", "dgate", "dweight"):
    c = certify(inp, output, fmt_of("fp32"))
    out[output] = [c.flagged, c.certified, hashlib.sha256(c.golden.numpy().tobytes()).hexdigest()]
print(json.dumps({"backend": mpmath.libmp.BACKEND, "env": environment("cpu")["mpmath"], "certified": out}))
"""


def test_certification_is_the_same_under_both_mpmath_backends():
    runs = {}
    for name, nogmpy in (("default", None), ("python", "1")):
        env = {k: v for k, v in os.environ.items() if k != "MPMATH_NOGMPY"}
        if nogmpy:
            env["MPMATH_NOGMPY"] = nogmpy
        runs[name] = subprocess.Popen([sys.executable, "-c", CERTIFY_ONE_CASE], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = {}
    for name, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        got[name] = json.loads(stdout)
    assert got["default"]["backend"] == "gmpy" and got["python"]["backend"] == "python"
    assert got["default"]["env"].endswith("(gmpy backend)") and got["python"]["env"].endswith("(python backend)")
    counts = got["default"]["certified"]
    assert sum(n for _, n, _ in counts.values()) >= 20          # mpmath really decided elements
    assert all(flagged == n for flagged, n, _ in counts.values())
    assert got["python"]["certified"] == counts                 # counts and every golden bit
