"""scaleacross-opt: plan LLM training across data-center buildings.

Python API::

    from scaleacross_opt import load_instance, solve
    result = solve(load_instance("instances/two-buildings-campus.yaml"), time_limit_s=30, seed=0)
    print(result.plan, result.step_time_s)
"""

__version__ = "0.1.0"

from .errors import InfeasibleError, InputError
from .io import load_instance, load_plan


def solve(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Solve an instance; see ``scaleacross_opt.optimizer.solve``."""
    from .optimizer import solve as _solve

    return _solve(*args, **kwargs)


__all__ = ["InfeasibleError", "InputError", "__version__", "load_instance", "load_plan", "solve"]
