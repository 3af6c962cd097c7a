"""`xhat`: xhat = x * rstd rounded to the activation dtype before the gamma product, which is then
formed in PyTorch's promoted dtype (HF Qwen3NextRMSNormGated / Qwen3_5RMSNormGated norm first;
HF MambaRMSNormGated / Zamba2RMSNormGated / BambaRMSNormGated gate first; Liger's casting mode
"llama")."""
from harness.references.models import RoundingModel, register

XHAT = register(RoundingModel("xhat", frozenset({"xhat"}), "xhat rounded to the activation dtype, the "
                              "gamma product in the promoted dtype"))
