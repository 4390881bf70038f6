"""Baselines the planner is compared with (and seeded from), one module per strategy, registered by
name in ``registry``; importing this package registers all of them. Adding one is one module plus its
import here."""

from . import annealing, crossdc, exhaustive, one_at_a_time, production, random_search
from .registry import (
    Baseline,
    BaselineResult,
    baseline_names,
    get_baseline,
    run_baseline,
    start_plans,
)

__all__ = [
    "Baseline", "BaselineResult", "annealing", "baseline_names", "crossdc", "exhaustive", "get_baseline",
    "one_at_a_time", "production", "random_search", "run_baseline", "start_plans",
]
