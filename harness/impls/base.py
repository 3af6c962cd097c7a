"""What the harness knows about an implementation under test (SPEC §3).

A factory `factory(hidden_size, *, eps, zero_centered_gamma, dtype, device) -> nn.Module` and what
it declares as attributes: `rounding` (a built-in model name or a set of points; "chain" when
absent), `math` ("accurate" or "fast": the float32 math between the rounding points, "accurate"
when absent), `ftz` (float32 subnormals may flush to zero; False when absent) and `backward`
(False: a forward-only, inference kernel whose forward is called on inputs that do not require
grad and whose dx, dgate and dweight are `skip` rows; True when absent), `act_follows`
("x", or "weight": TE-style, n and y in the weight's dtype), `devices`, and
`supports(case) -> None | str`. The math class can be overridden per run: `--impl SPEC@fast+ftz`
(`with_math`; the suffix travels with the spec to worker processes and replay commands). The op variants reach it as extra keyword arguments,
`group_size=G`, `norm_before_gate=False` and `activation="sigmoid"`, only for the cases that need
them; a factory whose signature does not take one gets `skip` rows for those cases."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from typing import Callable

from harness.references.mathclass import ACCURATE, MathClass, declared_math, parse_math
from harness.references.models import RoundingModel, resolve

VARIANT_KWARGS = ("group_size", "norm_before_gate", "activation")


def accepted_variants(factory: Callable) -> frozenset:
    """The variant keyword arguments the factory's signature takes (all of them with **kwargs)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):                  # a builtin or C callable: assume none
        return frozenset()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return frozenset(VARIANT_KWARGS)
    return frozenset(p.name for p in params if p.name in VARIANT_KWARGS)


@dataclass(frozen=True)
class Implementation:
    name: str
    factory: Callable | None           # None where `unavailable`
    rounding: RoundingModel = field(default_factory=lambda: resolve("chain"))
    act_follows: str = "x"             # the activation dtype: x's, or the weight's (TE)
    devices: tuple[str, ...] = ("cpu", "cuda")
    unavailable: str | None = None     # why it cannot run here (not installed, ...)
    source: str = "builtin"            # builtin | MODULE:ATTR | entry point ... | mutant
    spec: str = ""                     # what recreates it in a worker process (--impl's text); "" if nothing does
    notes: str = ""
    variants: frozenset = frozenset(VARIANT_KWARGS)
    supports: Callable | None = field(default=None, compare=False)
    findings: tuple[str, ...] = ()     # known departures from the contract (text of their fail reasons)
    math: MathClass = ACCURATE         # the float32 math between the rounding points (+ FTZ)
    backward: bool = True              # False: forward-only (only y is checked; dx, dgate, dweight skip)

    def skip_reason(self, device: str) -> str | None:
        if self.unavailable:
            return f"unavailable: {self.unavailable}"
        if device not in self.devices:
            return f"unavailable: {self.name} runs on {'/'.join(self.devices)} only, not {device}"
        return None

    def case_kwargs(self, case) -> dict:
        """The variant keyword arguments this case passes (only where it is not the default)."""
        kw = {}
        if case.group_size is not None:
            kw["group_size"] = case.group_size
        if not case.norm_before_gate:
            kw["norm_before_gate"] = False
        if case.activation != "silu":
            kw["activation"] = case.activation
        return kw

    def with_math(self, math: MathClass | str) -> "Implementation":
        """This implementation judged at another math class (a label such as "fast+ftz"): the spec
        carries it as `SPEC@label`, so a worker process and a replay command judge the same."""
        mc = parse_math(math) if isinstance(math, str) else math
        base = self.spec.rpartition("@")[0] if "@" in self.spec else self.spec
        return replace(self, math=mc, spec=f"{base}@{mc.label}" if base else "")

    def unsupported(self, case) -> str | None:
        """Why this case gives `skip` rows before running, or None: a variant the factory's
        signature does not take, or its own `supports(case)`."""
        missing = [k for k in self.case_kwargs(case) if k not in self.variants]
        if missing:
            return f"{self.name} takes no {' / '.join(missing)} argument"
        if self.supports is not None:
            reason = self.supports(case)
            if reason is not None:
                return str(reason) or "not supported"
        return None


def from_factory(name: str, factory: Callable, source: str, spec: str = "", **overrides) -> Implementation:
    """An Implementation from a factory and its declared attributes (UsageError for bad ones)."""
    from harness.references.errors import UsageError, said
    if not callable(factory):
        raise UsageError(f"--impl {name}: {source} is not callable")

    def declared(attr: str, default):
        """The factory's `attr`, or `default`: reading it runs the factory's own code (a property,
        __getattr__), whose error is the plug-in's, in one line."""
        if attr in overrides:
            return overrides.pop(attr)
        try:
            return getattr(factory, attr, default)
        except Exception as e:                # noqa: BLE001 — the plug-in's code
            raise UsageError(f"--impl {name}: reading {source}.{attr} raised {type(e).__name__}: {said(e)}") from None
    rounding = declared("rounding", "chain")
    try:
        model = resolve(rounding)
    except UsageError as e:
        raise UsageError(f"--impl {name}: {source}.{e}") from None
    act = declared("act_follows", "x")
    if act not in ("x", "weight"):
        raise UsageError(f"--impl {name}: {source}.act_follows is {act!r}; expected 'x' or 'weight'")
    devices = declared("devices", ("cpu", "cuda"))
    if isinstance(devices, (str, list, set, frozenset)):
        devices = (devices,) if isinstance(devices, str) else tuple(devices)
    if not isinstance(devices, tuple) or not devices or any(d not in ("cpu", "cuda") for d in devices):
        raise UsageError(f"--impl {name}: {source}.devices is {devices!r}; expected 'cpu' and/or 'cuda'")
    try:
        mc = declared_math(declared("math", None), declared("ftz", None))
    except UsageError as e:
        raise UsageError(f"--impl {name}: {source}.{e}") from None
    supports = declared("supports", None)
    if supports is not None and not callable(supports):
        raise UsageError(f"--impl {name}: {source}.supports is not callable")
    backward = declared("backward", True)
    if not isinstance(backward, bool):
        raise UsageError(f"--impl {name}: {source}.backward is {backward!r}; expected True or False")
    spec = spec or (name if source == "builtin" else "")
    return Implementation(name, factory, model, act, devices, source=source, spec=spec,
                          variants=accepted_variants(factory), supports=supports, math=mc, backward=backward,
                          **overrides)
