"""`fused`: no intermediate rounding; each output rounded once (mamba_ssm and fla RMSNormGated, vLLM,
HF FalconH1RMSNormGated, torch.compile on CUDA)."""
from harness.references.models import RoundingModel, register

FUSED = register(RoundingModel("fused", frozenset(), "no intermediate rounding: each output rounded once"))
