"""Errors the user sees: every one names the file, the field and the reason.

The CLI maps them to exit codes (``InputError`` -> 1, ``InfeasibleError`` -> 3,
``NoPlanInTimeError`` -> 5) and prints one line per problem, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputIssue:
    """One problem found in an input file."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        """``FILE: field: message`` on one line (line breaks inside names are shown escaped)."""
        text = f"{self.file}: {self.field or '<root>'}: {self.message}"
        return text.replace("\r", "\\r").replace("\n", "\\n")


class InputError(Exception):
    """An input file is unreadable or invalid; carries every problem found, not just the first."""

    def __init__(self, issues: list[InputIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


class InfeasibleError(Exception):
    """No plan satisfies the constraints; ``reason`` says which constraint binds and by how much."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class NoPlanInTimeError(Exception):
    """The search found no valid plan before its time limit; the instance is not proven infeasible."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
