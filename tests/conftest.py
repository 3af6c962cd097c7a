import itertools
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from harness.cases.case import Case
from harness.references.exact import Inputs


def make_case(**kw) -> Case:
    """A bf16 4x32 case of the default distributions, with `kw` overriding any field."""
    base = dict(dtype="bf16", gate_dtype="bf16", weight_dtype="bf16", shape=(4, 32),
                zero_centered_gamma=False, eps=1e-5, x_dist="standard", gate_dist="normal",
                gamma_dist="one", seed=0)
    base.update(kw)
    return Case(**base)


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


def running(pid: int) -> bool:
    """The process is running (a zombie that no one has reaped yet is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# A kernel module's source: the chain model with SiLU evaluated in bf16 — the precision regression
# that the throwaway kernel repositories of test_adoption, test_bisect and test_pytest_plugin plant.
SILU_IN_BF16 = """\
import torch
import torch.nn.functional as F
from torch import nn


class SiluInBf16(nn.Module):
    def __init__(self, hidden_size, *, eps, zero_centered_gamma, dtype, device):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.eps, self.zc = eps, zero_centered_gamma

    def forward(self, x, gate):
        xf = x.float()
        g = self.weight.float() + (1 if self.zc else 0)
        n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * g).to(x.dtype)
        return (n.float() * F.silu(gate.to(torch.bfloat16)).float()).to(x.dtype)   # SiLU in bf16


def silu_in_bf16(hidden_size, *, eps, zero_centered_gamma, dtype, device):
    return SiluInBf16(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)
"""


# Throwaway git repositories (test_adoption, test_bisect): the machine may have no global git
# identity; fixed dates keep a test's shas stable from run to run.
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit(repo: Path, files: dict[str, str], msg: str) -> str:
    """Write `files` (path in the repository -> text), commit them all; the new commit's sha."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD")


def pair_result(case, impl, settings=None, isolate="inline"):
    """One pair through the pipeline (inline by default: the unit tests' pairs need no worker)."""
    from harness.pipeline.drive import Pipeline
    from harness.pipeline.settings import Settings
    pipe = Pipeline(settings or Settings("cpu", repeats=0), isolate)
    try:
        return pipe.run(case, impl)
    finally:
        pipe.close()


def pair_rows(case, impl, settings=None, isolate="inline") -> list[dict]:
    from harness.analysis.check import rows
    return rows(pair_result(case, impl, settings, isolate))


_module_numbers = itertools.count()


def write_module(tmp_path, monkeypatch, body: str) -> str:
    """A plug-in module of `body` (dedented) under a name no other test uses, importable from
    tmp_path for the rest of the test; its name."""
    name = f"plug_{tmp_path.name.replace('-', '_')}_{next(_module_numbers)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def checked(impl, case):
    """(the implementation side's record, the pair's rows): the pair's two halves called directly,
    in this process."""
    from harness.analysis.check import rows
    from harness.pipeline.call import run_calls
    from harness.pipeline.judge import Judge
    from harness.pipeline.settings import Settings
    s = Settings("cpu", repeats=0)
    rec = run_calls(case, impl, s)
    return rec, rows(Judge(s).judge(case, impl, rec))
