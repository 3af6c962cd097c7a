"""The house: one installed import name; layers that import only downwards (references < cases <
reports < harness), no import circles (lazy imports included), no module over 400 lines, every
package listed for installation; the public API; and the homes a newcomer extends — a new output
format (and metric, in test_metrics.py; rounding model, in test_models.py) is one registration."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pandas as pd
import pytest

import harness

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"references": 0, "cases": 1, "reports": 2, "harness": 3}     # folder -> rank


def modules() -> dict[str, Path]:
    """Importable name -> file, for every module of the four layers."""
    out = {}
    for folder in LAYERS:
        prefix = "harness" if folder == "harness" else f"harness.{folder}"
        for f in (ROOT / folder).rglob("*.py"):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = f
    return out


def layer_of(name: str) -> int:
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in ("references", "cases", "reports"):
        return LAYERS[parts[1]]
    return LAYERS["harness"]


def imports_of(f: Path, name: str, known: set[str]) -> set[str]:
    """Every harness module `f` imports, at any depth of its code (lazy imports count)."""
    out = set()
    package = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(f.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports_of(f, n, set(mods)) for n, f in mods.items()}


def test_layers_import_only_downwards():
    bad = [(a, b) for a, deps in graph().items() for b in deps
           if layer_of(b) > layer_of(a) and b != "harness"]
    assert bad == []
    # and nothing below the top imports the harness package itself for anything
    for a, deps in graph().items():
        if layer_of(a) < LAYERS["harness"]:
            assert "harness" not in deps, a


def test_no_import_circles():
    g = graph()
    seen, stack, cycles = set(), [], []

    def visit(n):
        if n in stack:
            cycles.append(stack[stack.index(n):] + [n])
            return
        if n in seen:
            return
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if m.startswith(n + ".") or n.startswith(m + "."):     # a package and its own module
                continue
            visit(m)
        stack.pop()
        seen.add(n)

    for n in sorted(g):
        visit(n)
    assert cycles == []


def test_no_module_over_400_lines():
    long = {str(f.relative_to(ROOT)): n for f in modules().values() if (n := len(f.read_text().splitlines())) > 400}
    assert long == {}


def test_every_package_is_installed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = {n for n, f in modules().items() if f.name == "__init__.py"}
    data = set(cfg["package-data"])          # folders of data files: packages without code
    assert found | data == listed and not found & data
    assert set(cfg["package-dir"]) == {"harness", "harness.references", "harness.cases", "harness.reports"}


def test_public_api():
    assert harness.__all__ == ["verify", "assert_verified", "Results", "Unsupported", "strategies", "__version__"]
    for name in harness.__all__:
        assert getattr(harness, name) is not None, name
    assert callable(harness.verify) and callable(harness.assert_verified)
    assert issubclass(harness.Unsupported, Exception)
    assert hasattr(harness.strategies, "cases")
    with pytest.raises(AttributeError):
        harness.nope


def test_a_new_output_format_is_one_registration(tmp_path):
    """Registered, a format is written into every run directory with the others."""
    from harness.reports import outputs
    from harness.reports.outputs import OutputFormat, RunData, register, write_outputs
    from harness.reports.summary import summarize

    def write(data, path):
        path.write_text(f"{len(data.results)} rows, exit {data.exit_code}\n")
    register(OutputFormat("toy", "toy.txt", write))
    try:
        df = pd.DataFrame([{"case_id": "a", "impl": "i", "output": "y", "reference": "exact", "status": "pass",
                            "budget_metric": "ulp", "max_ulp": 0.1, "budget": 0.5, "out_dtype": "bf16",
                            "regime": "normal"}])
        written = write_outputs(tmp_path, RunData(df, summarize(df), 0, "t"), skip=("report",))
        assert (tmp_path / "toy.txt").read_text() == "1 rows, exit 0\n"
        assert tmp_path / "toy.txt" in written and (tmp_path / "summary.csv").exists()
    finally:
        outputs._REGISTRY.pop("toy")
