"""`chain`: the op chain Sequential(RMSNorm, SiLUGate) — the first op's output and its gradient are
handed over in the activation dtype (TransformerEngine's fusible ops, eager PyTorch, Megatron's
GatedDeltaNet norm)."""
from harness.references.models import RoundingModel, register

CHAIN = register(RoundingModel("chain", frozenset({"mid"}), "the op chain: the first op's output and "
                               "its gradient rounded to the activation dtype between the ops"))
