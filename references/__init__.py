"""Golden references for gated RMSNorm: exact float64 closed forms, mpmath, certification,
declared rounding-model references and the on-disk golden store.

Every formula of the project lives here; tests and the runner call it, never re-derive it."""
from harness.references.formats import FORMATS, Format, fmt_of, round_to, ulp
from harness.references.exact import Inputs, exact_outputs, OUTPUTS

__all__ = ["FORMATS", "Format", "fmt_of", "round_to", "ulp", "Inputs", "exact_outputs", "OUTPUTS"]
