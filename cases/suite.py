"""Suite files: human-editable TOML listing groups of cases (a cartesian product over the axes
given) and single cases. Every problem is reported as `FILE: KEY: reason` (UsageError -> exit 2).

    name = "quick"
    description = "..."
    [[group]]
    dtype = ["bf16", "fp16"]
    gate_dtype = ["same", "fp32"]        # "same" = x's dtype
    weight_dtype = ["same"]
    shape = [[8, 19], [2, 3, 128]]
    zero_centered_gamma = [false, true]
    eps = [1e-5]
    x_dist = ["standard"]
    gate_dist = ["normal", "negative"]
    gamma_dist = ["auto"]                # "auto" = "zero" when zero-centred, else "one"
    seeds = [0]
    group_size = ["hidden", 64]          # channels per group of the norm ("hidden": one group);
                                         # combinations whose hidden size it does not divide are dropped
    norm_before_gate = [true, false]     # false: the Mamba-2 order, RMSNorm(x * silu(gate))
    dy_dist = ["normal", "ones"]         # the upstream gradient: random normal, all ones, or "positive"
    activation = ["silu", "sigmoid"]     # the gate's function: silu(t) = t sigmoid(t), or sigmoid(t)
"""
from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from harness.cases.case import Case, distinct, param_problem
from harness.references.errors import UsageError

# The axes of a [[group]] (a [[case]] writes `seed` for `seeds`), in the product's order.
AXES = ("dtype", "gate_dtype", "weight_dtype", "shape", "zero_centered_gamma", "eps", "x_dist", "gate_dist",
        "gamma_dist", "seeds", "group_size", "norm_before_gate", "dy_dist", "activation")
DEFAULTS = {"gate_dtype": ["same"], "weight_dtype": ["same"], "zero_centered_gamma": [False],
            "eps": [1e-5], "x_dist": ["standard"], "gate_dist": ["normal"], "gamma_dist": ["auto"],
            "seeds": [0], "group_size": ["hidden"], "norm_before_gate": [True], "dy_dist": ["normal"],
            "activation": ["silu"]}
REQUIRED = ("dtype", "shape")
TOP_KEYS = {"name", "description", "group", "case"}


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: str
    cases: tuple[Case, ...]


def suites_dir():
    return resources.files("harness.cases") / "suites"


def list_suites() -> list[tuple[str, str, int]]:
    out = []
    for f in sorted(suites_dir().iterdir(), key=lambda p: p.name):
        if f.name.endswith(".toml"):
            s = load_suite(str(f))
            out.append((s.name, s.description, len(s.cases)))
    return out


def resolve_suite_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise UsageError(f"{name_or_path}: suite file not found")
        return p
    f = suites_dir() / f"{name_or_path}.toml"
    if not f.is_file():
        known = ", ".join(n for n, _, _ in list_suites())
        raise UsageError(f"unknown suite {name_or_path!r}; named suites: {known} (or give a .toml path)")
    return Path(str(f))


SPECIAL = {"gate_dtype": "same", "weight_dtype": "same", "gamma_dist": "auto", "group_size": "hidden"}


def _check_axis(where: str, key: str, values, written: str = "") -> list:
    """An axis's values, each checked as the case parameter it becomes (cases.case.param_problem);
    `written`: the key as the file wrote it, where not `key` (a [[case]]'s `seed`)."""
    if not isinstance(values, list):
        values = [values]
    named = f"{where}.{written or key}"
    if not values:
        raise UsageError(f"{named}: empty axis")
    for v in values:
        if SPECIAL.get(key) == v:
            continue
        why = param_problem("seed" if key == "seeds" else key, v)
        if why:
            special = f" (or \"{SPECIAL[key]}\")" if key in SPECIAL else ""
            raise UsageError(f"{named}: {v!r} {why}{special}")
    return values


def _expand(where: str, table: dict, single: bool) -> list[Case]:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: expected a table")
    unknown = set(table) - set(AXES) - ({"seed"} if single else set())
    if unknown:
        raise UsageError(f"{where}.{sorted(unknown)[0]}: unknown key; known keys: {', '.join(AXES)}")
    written = {}
    if single and "seed" in table:
        if "seeds" in table:
            raise UsageError(f"{where}: both seed and seeds; give one")
        table = {**table, "seeds": [table["seed"]]}
        table.pop("seed")
        written["seeds"] = "seed"
    for k in REQUIRED:
        if k not in table:
            raise UsageError(f"{where}.{k}: missing (required)")
    if single and "shape" in table:
        table = {**table, "shape": [table["shape"]]}
    axes = {k: _check_axis(where, k, table.get(k, DEFAULTS.get(k)), written.get(k, "")) for k in AXES}
    cases = []
    for combo in itertools.product(*(axes[k] for k in AXES)):
        c = dict(zip(AXES, combo))
        gd = c["dtype"] if c["gate_dtype"] == "same" else c["gate_dtype"]
        wd = c["dtype"] if c["weight_dtype"] == "same" else c["weight_dtype"]
        gamma = c["gamma_dist"]
        if gamma == "auto":
            gamma = "zero" if c["zero_centered_gamma"] else "one"
        group = None if c["group_size"] == "hidden" else c["group_size"]
        if group is not None and c["shape"][-1] % group:
            if single:
                raise UsageError(f"{where}.group_size: {group} does not divide the hidden size {c['shape'][-1]}")
            continue                         # an invalid combination of a group's axes: not a case
        cases.append(Case(c["dtype"], gd, wd, tuple(c["shape"]), c["zero_centered_gamma"],
                          float(c["eps"]), c["x_dist"], c["gate_dist"], gamma, c["seeds"], group,
                          c["norm_before_gate"], c["dy_dist"], c["activation"]))
    if not cases:
        raise UsageError(f"{where}: no valid case (group_size divides none of the hidden sizes)")
    return cases


def parse_suite(text: str, path: str) -> Suite:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: TOML syntax error: {e}") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise UsageError(f"{path}: {sorted(unknown)[0]}: unknown key; known: {', '.join(sorted(TOP_KEYS))}")
    groups, singles = data.get("group", []), data.get("case", [])
    if not isinstance(groups, list) or not isinstance(singles, list):
        raise UsageError(f"{path}: group/case must be arrays of tables ([[group]], [[case]])")
    cases: list[Case] = []
    for i, g in enumerate(groups):
        cases += _expand(f"{path}: group[{i}]", g, single=False)
    for i, c in enumerate(singles):
        cases += _expand(f"{path}: case[{i}]", c, single=True)
    if not cases:
        raise UsageError(f"{path}: no cases (add a [[group]] or [[case]])")
    return Suite(str(data.get("name", Path(path).stem)), str(data.get("description", "")), path,
                 tuple(distinct(cases)))      # same-dtype duplicates collapse


def load_suite(name_or_path: str) -> Suite:
    p = resolve_suite_path(name_or_path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{p}: cannot read suite: {e}") from None
    return parse_suite(text, str(p))
