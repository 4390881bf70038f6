"""Arithmetic shared by the CP-SAT model's constraint families: the fixed-point scale, the horizon, products of
two variables (exact or capped at the horizon), ring volumes and per-building layer counts."""

from __future__ import annotations

import math

from ortools.sat.python import cp_model

from .variables import PlanVars

SCALE = 1000  # fixed-point scale for fractional coefficients
HORIZON_US = 10**11  # ~28 hours: larger than any step, small enough that scaled sums stay in int64
BUCKET_STEPS = 16  # the last gradient bucket's size is counted in 1/16 layers (rounded down)
TERM_CAP = 10**17  # a bound's term (coefficient × its variable's upper bound) stays below this (int64: 9.2e18)
RHS_CAP = 10**13  # constants of the ZeRO-3 gather bounds are capped here (µs × SCALE: ~115 days)


def new_var(model: cp_model.CpModel, name: str, upper: int = HORIZON_US) -> cp_model.IntVar:
    """A non-negative integer variable (µs unless its name says otherwise) of at most ``upper``."""
    return model.NewIntVar(0, upper, name)


def upper_bound(var: cp_model.IntVar) -> int:
    """The largest value of ``var``'s domain."""
    return var.domain.max()


def exact_product(model: cp_model.CpModel, name: str, a: cp_model.LinearExprT, b: cp_model.LinearExprT, upper: int
                  ) -> cp_model.IntVar:
    """a·b as a variable of domain [0, ``upper``] (the caller's bound of the product)."""
    out = model.NewIntVar(0, max(upper, 0), name)
    model.AddMultiplicationEquality(out, [a, b])
    return out


def capped_product(model: cp_model.CpModel, name: str, a: cp_model.IntVar, b: cp_model.IntVar) -> cp_model.IntVar:
    """min(a·b, HORIZON_US): capping keeps the term a lower bound, and a plan slower than the horizon
    stays admissible instead of making the model infeasible."""
    reach = upper_bound(a) * upper_bound(b)
    out = new_var(model, name)
    if reach <= HORIZON_US:
        model.AddMultiplicationEquality(out, [a, b])
        return out
    if reach >= 1 << 62:
        raise ValueError(f"product {name} may reach {reach}, beyond int64")
    uncapped = model.NewIntVar(0, reach, f"{name}_uncapped")
    model.AddMultiplicationEquality(uncapped, [a, b])
    model.AddMinEquality(out, [uncapped, HORIZON_US])
    return out


def ring_factor(group: int) -> float:
    """Ring reduce-scatter / all-gather volume 2(n−1)/n relative to its n = 2 value (which the
    coefficients use), for a DP group of at least ``group`` ranks."""
    return 2 * (group - 1) / group if group > 1 else 1.0


def term_coefficient(us_per_unit: float, var: cp_model.IntVar) -> int:
    """⌊SCALE × ``us_per_unit``⌋, lowered where needed so the term (× ``var``'s upper bound) stays in int64."""
    return min(math.floor(SCALE * us_per_unit), TERM_CAP // max(1, upper_bound(var)))


def layers_if_used(pv: PlanVars, name: str, unused: int, layers: list[cp_model.IntVar] | None = None
                   ) -> list[cp_model.IntVar]:
    """Per building: ``layers[b]`` (default ``pv.layers``) where it is used, else ``unused`` (for a min or max
    over the used ones)."""
    total = pv.instance.job.model_spec.layers
    held = [pv.model.NewIntVar(0, total, f"{name}[{building}]") for building in pv.buildings]
    for b, var in enumerate(held):
        pv.model.Add(var == (layers or pv.layers)[b]).OnlyEnforceIf(pv.used[b])
        pv.model.Add(var == unused).OnlyEnforceIf(pv.used[b].Not())
    return held
