"""Comparing an implementation's outputs with the references (compare), explaining a failure (explain),
the checks of one (case, implementation) pair and their rows (check), and the typed result they
make (result)."""
