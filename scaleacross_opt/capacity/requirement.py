"""Requirement queries: the smallest link bandwidth (largest latency) at which the best plan stays within a
given fraction of the step it reaches on ideal links.

The best step is monotone in the field: non-increasing in bandwidth and non-decreasing in latency. Every plan's
simulated step is (a faster link never delays a transfer), the set of plans does not depend on links (memory
does not), and a minimum over a fixed set of monotone functions is monotone. So "within the target" holds on
one side of a threshold, found by bisection in log space. A solve cut short by its time limit may miss the
optimum, though: ``Requirement.violations`` lists every pair of measured points that breaks monotonicity.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..catalog import coefficients as co
from ..errors import InputError, InputIssue
from ..spec import Instance
from ..spec import bounds as B
from .paths import expand, format_path, get, parse_path

EXPAND_FACTOR = 4.0  # the bracket search multiplies / divides the value by this until the answer is bracketed
MONOTONE_TOLERANCE = 1e-6  # relative: smaller step differences are rounding, not a violation


@dataclass(frozen=True)
class CurvePoint:
    """One solve of the query: the field's value, the best step there, and whether it meets the target."""

    value: float
    step_time_s: float
    meets_target: bool
    plan: dict[str, Any]


@dataclass
class Requirement:
    """The answer of a requirement query."""

    field: str
    within: float  # fraction above the ideal step allowed (0.05: 5 %)
    ideal_step_time_s: float
    target_step_time_s: float
    value: float | None  # smallest bandwidth / largest latency meeting the target; None if none within bounds
    curve: list[CurvePoint] = field(default_factory=list)  # every solve, in the order measured
    violations: list[tuple[CurvePoint, CurvePoint]] = field(default_factory=list)  # monotonicity broken

    @property
    def at_value(self) -> CurvePoint | None:
        """The measured point at the answer."""
        return next((p for p in self.curve if p.value == self.value), None)

    def to_json(self) -> dict[str, Any]:
        """The ``requirement --json`` document."""
        at = self.at_value
        return {"field": self.field, "within": self.within, "value": self.value,
                "step_time_s": at.step_time_s if at else None, "plan": at.plan if at else None,
                "ideal_step_time_s": self.ideal_step_time_s, "target_step_time_s": self.target_step_time_s,
                "monotone": not self.violations,
                "violations": [[asdict(a) | {"plan": None}, asdict(b) | {"plan": None}] for a, b in self.violations],
                "curve": [{"value": p.value, "step_time_s": p.step_time_s, "meets_target": p.meets_target}
                          for p in sorted(self.curve, key=lambda p: p.value)]}


def _kind(field_path: str, steps: list[Any], source: str) -> str:
    last = steps[-1]
    if last == "bandwidth_gbps":
        return "bandwidth"
    if isinstance(last, str) and last.endswith("latency_us"):
        return "latency"
    raise InputError([InputIssue(source, field_path, "a requirement is asked of a bandwidth_gbps or latency_us "
                                                     "field (e.g. cluster.links[*].bandwidth_gbps)")])


def _effective(value: float | None, field: str) -> float:
    """A field's value as the model reads it: an unset building fabric latency is the catalog's default."""
    if value is None and field == "fabric_latency_us":
        return co.DEFAULT_FABRIC_LATENCY_US
    if value is None:
        raise ValueError(f"{field} is not set")
    return value


def ideal_updates(field_path: str, steps: list[Any]) -> dict[str, float]:
    """Updates giving ideal links where ``field_path`` points: bandwidth at the schema's maximum and latency at its
    minimum (for a link field, both of the link's; a building's fabric latency alone otherwise)."""
    parent = format_path(steps[:-1])
    if len(steps) >= 3 and steps[-3] == "links":
        return {f"{parent}.bandwidth_gbps": B.MAX_BANDWIDTH_GBPS, f"{parent}.latency_us": B.MIN_LATENCY_US}
    return {field_path: B.MAX_BANDWIDTH_GBPS if steps[-1] == "bandwidth_gbps" else B.MIN_LATENCY_US}


def requirement(instance: Instance, field_path: str, *, within: float = 0.05, time_limit_s: float = 60.0,
                seed: int = 0, precision: float = 0.02, source: str = "<instance>",
                progress: Callable[[str], None] | None = None) -> Requirement:
    """The smallest value of a ``…bandwidth_gbps`` field (largest of a ``…latency_us`` field) at which the best
    plan's step is at most ``(1 + within)`` × the step with ideal links there (see ``ideal_updates``).

    ``field_path`` may select several elements (``cluster.links[*].bandwidth_gbps``): they all take the value.
    Each value is solved with ``time_limit_s`` and ``seed``; the search brackets the answer from the instance's
    own value by factors of 4, then bisects in log space until the bracket is within ``1 + precision``.
    Raises ``InputError`` for a bad field, ``InfeasibleError`` / ``NoPlanInTimeError`` as ``solve`` does."""
    from ..optimizer import solve

    try:
        steps = parse_path(field_path)
        document = instance.model_dump(mode="json")
        current = [_effective(get(document, concrete), steps[-1]) for concrete in expand(document, steps)]
    except ValueError as err:
        raise InputError([InputIssue(source, field_path, str(err))]) from None
    bandwidth = _kind(field_path, steps, source) == "bandwidth"
    if within <= 0 or precision <= 0:
        raise ValueError("within and precision must be > 0")
    low, high = (B.MIN_BANDWIDTH_GBPS, B.MAX_BANDWIDTH_GBPS) if bandwidth else (B.MIN_LATENCY_US, B.MAX_LATENCY_US)
    say = progress or (lambda _msg: None)

    ideal = solve(instance.with_updates(ideal_updates(field_path, steps), source=source),
                  time_limit_s=time_limit_s, seed=seed).step_time_s
    target = ideal * (1 + within)
    say(f"ideal links: {ideal:.4f} s; target ≤ {target:.4f} s (+{within:.1%})")
    result = Requirement(field_path, within, ideal, target, None)

    def measure(value: float) -> bool:
        solved = solve(instance.with_updates({field_path: value}, source=source), time_limit_s=time_limit_s,
                       seed=seed)
        point = CurvePoint(value, solved.step_time_s, solved.step_time_s <= target * (1 + 1e-12),
                           solved.plan.model_dump(mode="json"))
        result.curve.append(point)
        say(f"{field_path} = {value:.6g}: {point.step_time_s:.4f} s ({'meets' if point.meets_target else 'misses'} "
            "the target)")
        return point.meets_target

    def toward(value: float, worse: bool) -> float:
        """The next value of the bracket search, clamped to the schema's bounds."""
        grow = bandwidth != worse  # bandwidth gets better upwards, latency downwards
        return min(high, value * EXPAND_FACTOR) if grow else max(low, value / EXPAND_FACTOR)

    value = min(current) if bandwidth else max(current)
    good = bad = None
    while good is None or bad is None:
        if measure(value):
            good = value
        else:
            bad = value
        following = toward(value, worse=good == value)
        if following == value:  # at the schema's bound: every value meets the target, or none does
            break
        value = following
    if good is not None and bad is not None:
        while max(good, bad) / min(good, bad) > 1 + precision:
            middle = math.sqrt(good * bad)
            if measure(middle):
                good = middle
            else:
                bad = middle
    result.value = good
    result.violations = _violations(result.curve, bandwidth)
    return result


def _violations(curve: list[CurvePoint], bandwidth: bool) -> list[tuple[CurvePoint, CurvePoint]]:
    """Consecutive measured points (by value) where the step moves the wrong way beyond rounding."""
    ordered = sorted(curve, key=lambda p: p.value)
    sign = 1 if bandwidth else -1  # bandwidth: the step must not rise with the value; latency: must not fall
    return [(a, b) for a, b in itertools.pairwise(ordered)
            if sign * (b.step_time_s - a.step_time_s) > MONOTONE_TOLERANCE * a.step_time_s]

