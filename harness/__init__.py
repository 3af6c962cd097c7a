"""Numerical verification harness for gated RMSNorm (RMSNorm -> SiLUGate)."""
__version__ = "0.1.0"
