"""Shared fixtures: repository paths, shipped-instance loading, CLI invocation, schedule availability.

Every path is derived from this file's location, so the tests do not depend on the working directory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from scaleacross_opt.io import load_instance
from scaleacross_opt.spec import Instance

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (parent of ``tests/``)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def instances_dir(repo_root: Path) -> Path:
    """``instances/``: the shipped cluster + job instances."""
    return repo_root / "instances"


@pytest.fixture(scope="session")
def models_dir(repo_root: Path) -> Path:
    """``models/``: the shipped model architectures."""
    return repo_root / "models"


@pytest.fixture(scope="session")
def load_shipped_instance(instances_dir: Path) -> Callable[[str], Instance]:
    """``load_shipped_instance("two-buildings-campus-llama3-405b")`` loads ``instances/<name>.yaml``."""

    def load(name: str) -> Instance:
        path = instances_dir / (name if name.endswith((".yaml", ".yml", ".json")) else f"{name}.yaml")
        return load_instance(path)

    return load


@dataclass(frozen=True)
class CliResult:
    """What one CLI invocation produced (stdout and stderr kept apart)."""

    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into stdout unless told otherwise
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:  # click ≥ 8.2 always keeps them apart
        return CliRunner()


@pytest.fixture
def run_cli() -> Callable[[Sequence[str]], CliResult]:
    """Run ``scaleacross-opt ARGS`` in-process; returns exit code, stdout, stderr, exception."""
    from scaleacross_opt.cli import main

    def run(args: Sequence[str]) -> CliResult:
        result = _runner().invoke(main, [str(a) for a in args], catch_exceptions=True)
        exception = result.exception if not isinstance(result.exception, SystemExit) else None
        return CliResult(result.exit_code, result.stdout, result.stderr, exception)

    return run


def schedules_registered(*names: str) -> bool:
    """True when every schedule in ``names`` is registered (the schedules package may still be filling)."""
    from scaleacross_opt.schedules import schedule_names

    return set(names) <= set(schedule_names())


@pytest.fixture
def one_f_one_b() -> str:
    """The name of the 1F1B schedule; skips the test while no such schedule is registered."""
    if not schedules_registered("1f1b"):
        pytest.skip("schedule '1f1b' is not registered yet (scaleacross_opt.schedules is being filled)")
    return "1f1b"


SMALL = "small-two-buildings-llama3-8b.yaml"
# A hand-written plan for the small instance with placement and network omitted (DP across once filled in).
BARE_PLAN = {"tp": 2, "pp": 1, "dp": 64, "micro_batch_size": 2, "schedule": "1f1b"}


@pytest.fixture
def small(instances_dir: Path) -> Path:
    """The small two-building instance file."""
    return instances_dir / SMALL


@pytest.fixture(scope="session")
def three_building_zb_v(load_shipped_instance: Callable[[str], Instance]) -> tuple:
    """(instance, pruned design space, plan): the three-building campus's ZB-V pp3 plan with PP across, in
    the CP-SAT model's own settings (first network options, TP overlap as the space sets it)."""
    from scaleacross_opt.optimizer.coefficients import prune_space
    from scaleacross_opt.optimizer.neighbourhood import place
    from scaleacross_opt.optimizer.space import design_space
    from scaleacross_opt.plan_defaults import fill_defaults
    from scaleacross_opt.spec import CrossBuilding, NetworkConfig, Plan

    instance = load_shipped_instance("three-buildings-campus-llama3-70b")
    space = prune_space(instance, design_space(instance))
    network = NetworkConfig(intra_building=space.intra_network[0], cross_building=space.cross_network[0])
    plan = Plan(tp=2, cp=4, pp=3, dp=512, virtual_stages=2, micro_batch_size=1, schedule="zb-v", zero_stage=1,
                network=network, tp_comm_overlap=space.tp_comm_overlap)
    return instance, space, place(instance, fill_defaults(instance, plan), CrossBuilding.PP)


@pytest.fixture
def bare_plan_fields() -> dict[str, object]:
    """A copy of ``BARE_PLAN``."""
    return dict(BARE_PLAN)


@pytest.fixture
def bare_plan(tmp_path: Path) -> Path:
    """``BARE_PLAN`` written as a YAML file."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(BARE_PLAN), encoding="utf-8")
    return path


# Hypothesis profiles for the property-based tests (tests/test_fuzz_*.py). ``ci`` is the default:
# deterministic (derandomize) and sized so both fuzz files run in about a minute on a 2-core machine;
# ``thorough`` explores more (HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_fuzz_*.py).
# Each test sets its own ``max_examples`` for ``ci``; ``thorough`` multiplies it (see ``fuzz_examples``).
import os  # noqa: E402

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", deadline=None, derandomize=True, print_blob=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "thorough", deadline=None, derandomize=False, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
