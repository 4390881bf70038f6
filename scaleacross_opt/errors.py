"""Errors the user sees: every one names the file, the field and the reason.

The CLI maps them to exit codes (``InputError`` -> 1, ``InfeasibleError`` -> 3,
``NoPlanInTimeError`` -> 5) and prints one line per problem, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

# Every character str.splitlines() breaks at, mapped to its escape (\n → "\\n", \u2028 → "\\u2028").
_ESCAPE_LINE_BREAKS = {ord(c): c.encode("unicode_escape").decode() for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


@dataclass(frozen=True)
class InputIssue:
    """One problem found in an input file."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        """``FILE: field: message`` on one line (line-breaking characters inside names are shown escaped)."""
        return f"{self.file}: {self.field or '<root>'}: {self.message}".translate(_ESCAPE_LINE_BREAKS)


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


class SimulationDeadlineError(Exception):
    """A simulation given a deadline (``time.perf_counter()`` value) was still running when it passed."""
