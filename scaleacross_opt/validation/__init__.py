"""Semantic checks of inputs and plans, written independently of the optimizer.

Each check returns ``[(field_path, message), …]``; an empty list means valid. The plan checks are
the validator every solver output passes through, so they share no code with the CP-SAT model.
"""
