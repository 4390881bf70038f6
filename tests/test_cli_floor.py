"""The physical floor in the CLI: ``validate --instance``, ``estimate`` and ``simulate`` print it, and
``solve`` refuses (exit 4, nothing written) a result below it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from scaleacross_opt.io import load_instance, load_plan
from scaleacross_opt.validation.physical_floor import physical_floor

FLOOR_LINE = re.compile(r"^physical floor: (\d+\.\d{4}) s \(binding: (.+)\)$", flags=re.MULTILINE)


@pytest.fixture
def expected(small: Path, bare_plan: Path):
    """The floor of the filled-in plan, computed directly."""
    instance = load_instance(small)
    return physical_floor(instance, load_plan(bare_plan, instance))


def test_validate_plan_prints_the_floor(run_cli, small: Path, bare_plan: Path, expected) -> None:
    result = run_cli(["validate", "--instance", small, bare_plan])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{bare_plan}: ok (plan)"
    match = FLOOR_LINE.search(result.stdout)
    assert match and float(match[1]) == pytest.approx(expected.seconds, abs=1e-4)
    assert match[2] == expected.binding.resource


def test_validate_without_instance_or_of_an_instance_prints_no_floor(run_cli, small: Path, bare_plan: Path) -> None:
    for args in (["validate", bare_plan], ["validate", small], ["validate", "--instance", small, small]):
        result = run_cli(args)
        assert result.exit_code == 0, result.stderr
        assert "physical floor" not in result.stdout


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_reports_print_the_floor_last(command: str, run_cli, small: Path, bare_plan: Path, expected) -> None:
    result = run_cli([command, small, "--plan", bare_plan])
    assert result.exit_code == 0, result.stderr
    last = result.stdout.rstrip("\n").splitlines()[-1]
    match = FLOOR_LINE.fullmatch(last)
    assert match, last
    assert float(match[1]) == pytest.approx(expected.seconds, abs=1e-4) and match[2] == expected.binding.resource


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_json_reports_carry_the_floor(command: str, run_cli, small: Path, bare_plan: Path, expected) -> None:
    result = run_cli([command, small, "--plan", bare_plan, "--json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["physical_floor_s"] == expected.seconds
    assert payload["physical_floor_binding"] == expected.binding.resource
    assert payload["step_time_s"] >= payload["physical_floor_s"]


def test_solve_result_below_the_floor_is_an_internal_error(run_cli, small: Path, expected, bare_plan: Path,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A solver result faster than physics is a bug: exit 4 with the floor's numbers, no plan written."""
    import scaleacross_opt.optimizer

    instance = load_instance(small)
    plan = load_plan(bare_plan, instance)
    too_fast = SimpleNamespace(plan=plan, step_time_s=expected.seconds / 2)
    monkeypatch.setattr(scaleacross_opt.optimizer, "solve", lambda *args, **kwargs: too_fast)
    out = tmp_path / "out.json"
    result = run_cli(["solve", small, "--time-limit", "1", "--out", out])
    assert result.exit_code == 4
    assert result.stderr.strip() == (f"internal error: plan {expected.seconds / 2:.4f} s is below the physical floor "
                                     f"{expected.seconds:.4f} s (binding: {expected.binding.resource})")
    assert result.stdout == "" and not out.exists()
