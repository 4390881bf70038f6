"""Heuristic plans users compare against (and the optimizer starts from)."""
