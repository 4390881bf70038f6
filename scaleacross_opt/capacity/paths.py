"""Dotted field paths into an instance document: ``cluster.links[0].bandwidth_gbps``, ``cluster.links[*].latency_us``.

A path is a chain of field names and ``[i]`` list indices; ``[*]`` stands for every element of a list. Paths
address the instance as its file would be written (model and GPU names resolve like in a file).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InputError, InputIssue

WILDCARD = "*"
Step = str | int  # a field name, a list index, or WILDCARD
_TOKEN = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+|\*)\]")


def parse_path(path: str) -> list[Step]:
    """The steps of ``path``; ValueError saying what is wrong for a malformed one."""
    steps: list[Step] = []
    pos = 0
    while pos < len(path):
        match = _TOKEN.match(path, pos)
        if match is None or (match.group(1) and match.group(0).startswith(".") != bool(steps)):
            raise ValueError(f"malformed path {path!r} at character {pos + 1}: expected field names joined by "
                             "'.' and list indices [i] or [*]")
        name, index = match.groups()
        steps.append(name if name else (WILDCARD if index == WILDCARD else int(index)))
        pos = match.end()
    if not steps or not isinstance(steps[0], str) or steps[0] == WILDCARD:
        raise ValueError(f"malformed path {path!r}: it must start with a field name")
    return steps


def format_path(steps: list[Step]) -> str:
    """``steps`` written back as a path."""
    return "".join(f"[{s}]" if isinstance(s, int) or s == WILDCARD else f".{s}" for s in steps).lstrip(".")


def expand(document: Any, steps: list[Step]) -> list[list[Step]]:
    """The concrete paths (no wildcard) ``steps`` selects in ``document``; ValueError if one does not exist."""
    found: list[list[Step]] = [[]]
    for depth, step in enumerate(steps):
        following: list[list[Step]] = []
        for prefix in found:
            node = get(document, prefix)
            where = format_path(prefix) or "the instance"
            if isinstance(step, str) and step != WILDCARD:
                if not isinstance(node, dict):
                    hint = " (select elements with [i] or [*])" if isinstance(node, list) else ""
                    raise ValueError(f"{where} is {_kind(node)}, it has no field {step!r}{hint}")
                if step not in node:
                    raise ValueError(f"{where} has no field {step!r} (fields: {', '.join(node)})")
                following.append([*prefix, step])
            elif not isinstance(node, list):
                raise ValueError(f"{where} is {_kind(node)}, not a list: [{step}] needs a list")
            elif step == WILDCARD:
                following += [[*prefix, i] for i in range(len(node))]
            elif step >= len(node):
                raise ValueError(f"index {step} out of range: {where} has {len(node)} element"
                                 f"{'s' * (len(node) != 1)}")
            else:
                following.append([*prefix, step])
        found = following
        if not found:
            raise ValueError(f"{format_path(steps[:depth + 1])} selects nothing (empty list)")
    return found


def get(document: Any, steps: list[Step]) -> Any:
    """The value at concrete path ``steps``."""
    for step in steps:
        document = document[step]
    return document


def _kind(value: Any) -> str:
    return "not set (null)" if value is None else f"a {type(value).__name__}"


def apply_updates(document: dict[str, Any], updates: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A copy of ``document`` with each path of ``updates`` set to its value; InputError naming every bad path."""
    out = copy.deepcopy(document)
    issues = []
    for path, value in updates.items():
        try:
            for steps in expand(out, parse_path(path)):
                get(out, steps[:-1])[steps[-1]] = copy.deepcopy(value)
        except ValueError as err:
            issues.append(InputIssue(source, path, str(err)))
    if issues:
        raise InputError(issues)
    return out
