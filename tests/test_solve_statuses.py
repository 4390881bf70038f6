"""solve's statuses: proven infeasible (3), no plan in time (5), interrupted with the best plan so far (130)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_opt.errors import InfeasibleError, NoPlanInTimeError
from scaleacross_opt.io import load_instance
from scaleacross_opt.optimizer import solve
from scaleacross_opt.optimizer.diagnose import memory_shortfall
from scaleacross_opt.simulator import simulate


def test_total_state_bytes_prove_infeasibility_at_once(run_cli, instances_dir: Path) -> None:
    instance = load_instance(instances_dir / "infeasible-memory-llama3-405b-a100.yaml")
    reason = memory_shortfall(instance)
    assert reason is not None and "even fully sharded" in reason
    with pytest.raises(InfeasibleError, match="does not fit memory anywhere"):
        solve(instance, time_limit_s=30)
    result = run_cli(["solve", instances_dir / "infeasible-memory-llama3-405b-a100.yaml", "--json"])
    assert result.exit_code == 3
    payload = json.loads(result.stdout)
    assert payload["status"] == "infeasible" and "TiB" in payload["reason"]


def test_feasible_instances_pass_the_memory_precheck(instances_dir: Path) -> None:
    for path in sorted(instances_dir.glob("*.yaml")):
        if not path.stem.startswith("infeasible"):
            assert memory_shortfall(load_instance(path)) is None, path.stem


def test_no_plan_in_time_is_its_own_status(run_cli, small: Path, monkeypatch) -> None:
    def too_slow(*args: object, **kwargs: object) -> None:
        raise NoPlanInTimeError("no plan found within the time limit of 1 s (not proven infeasible)")

    monkeypatch.setattr("scaleacross_opt.optimizer.solve", too_slow)
    result = run_cli(["solve", small, "--json", "--time-limit", "1"])
    assert result.exit_code == 5
    assert json.loads(result.stdout)["status"] == "no_plan_in_time"
    assert result.stderr.startswith("no plan in time:")


def test_interrupt_keeps_the_best_plan_so_far(run_cli, small: Path, tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C during the search: the best plan simulated so far is returned, printed and written."""
    calls = []

    def interrupted_after_two(instance, plan, deadline=None, memo=None):
        calls.append(plan)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return simulate(instance, plan)

    instance = load_instance(small)
    result = solve(instance, time_limit_s=30, evaluate=interrupted_after_two)
    assert result.status == "interrupted"
    assert result.plan in calls[:2]

    monkeypatch.setattr("scaleacross_opt.simulator.simulate", interrupted_after_two)
    calls.clear()
    out = tmp_path / "plan.json"
    cli_result = run_cli(["solve", small, "--json", "--out", out, "--time-limit", "30"])
    assert cli_result.exit_code == 130
    assert json.loads(cli_result.stdout)["solver"]["status"] == "interrupted"
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(cli_result.stdout)["plan"]


def test_progress_lines_show_time_best_and_bound(run_cli, small: Path) -> None:
    result = run_cli(["solve", small, "--time-limit", "10"])
    assert result.exit_code == 0, result.stderr
    rounds = [line for line in result.stderr.splitlines() if "] round " in line]
    assert rounds and all(line.startswith("[") and "best " in line for line in rounds)
    assert any("gap " in line for line in rounds)
    assert "GPUs used       bldg-a 64 of 64, bldg-b 64 of 64" in result.stdout
    assert "busiest " in result.stdout and "s of traffic per step" in result.stdout
    quiet = run_cli(["solve", small, "--time-limit", "10", "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
