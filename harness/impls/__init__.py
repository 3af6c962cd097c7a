"""Implementations under test: built-ins and adapters (one module each, with an `implementations()`
function), plug-ins and entry points (registry), and what the harness knows of each (base)."""
