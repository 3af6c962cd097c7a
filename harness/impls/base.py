"""What the harness knows about an implementation under test (SPEC section 3)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

ROUNDINGS = ("chain", "fused")


@dataclass(frozen=True)
class Implementation:
    name: str
    factory: Callable                  # factory(hidden, *, eps, zero_centered_gamma, dtype, device)
    rounding: str = "chain"            # declared rounding model
    act_follows: str = "x"             # activation dtype follows x's dtype, or the weight's (TE)
    devices: tuple[str, ...] = ("cpu", "cuda")
    unavailable: str | None = None     # a reason when it cannot run here (not installed, ...)
    source: str = "builtin"            # builtin | plugin MODULE:ATTR | entry point
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def skip_reason(self, device: str) -> str | None:
        if self.unavailable:
            return f"unavailable: {self.unavailable}"
        if device not in self.devices:
            return f"unavailable: {self.name} runs on {'/'.join(self.devices)} only, not {device}"
        return None
