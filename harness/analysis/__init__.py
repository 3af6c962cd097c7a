"""Comparing an implementation's outputs with the references (compare), explaining a failure (explain),
and the result rows of one (case, implementation) pair (check)."""
