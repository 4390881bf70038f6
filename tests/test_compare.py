"""compare (issue 10): rows and their JSON keys, the planner never slower than the cheap baselines,
the explanation, the plot, CLI errors."""

from __future__ import annotations

import json

import pytest

from scaleacross_opt.compare import compare, compare_text, method_names

SMALL = "small-two-buildings-llama3-8b"
SINGLE = "single-building-llama3-70b"
KEYS = ["method", "step_time_s", "speedup_vs_production_pct", "mfu", "wall_s", "simulator_calls", "plan"]


@pytest.mark.parametrize("name", [SMALL, SINGLE, "metro-two-buildings-llama3-70b"])
def test_planner_never_slower_than_cheap_baselines(load_shipped_instance, name: str) -> None:
    instance = load_shipped_instance(name)
    rows = {r.method: r for r in compare(instance, methods=["planner", "crossdc-sota"], time_limit_s=3)}
    assert list(rows) == ["planner", "production", "crossdc-sota"]  # production always runs: the reference
    planner = rows["planner"].step_time_s
    for method in ("production", "crossdc-sota"):
        if rows[method].step_time_s is not None:
            assert planner <= rows[method].step_time_s * (1 + 1e-9)
    assert rows["production"].speedup_vs_production_pct == 0.0
    t_prod = rows["production"].step_time_s
    assert rows["planner"].speedup_vs_production_pct == pytest.approx((t_prod / planner - 1) * 100)


def test_unknown_method_is_refused(load_shipped_instance) -> None:
    with pytest.raises(KeyError, match="unknown method"):
        compare(load_shipped_instance(SMALL), methods=["planner", "magic"], time_limit_s=1)


def test_text_ends_with_the_explanation(load_shipped_instance) -> None:
    instance = load_shipped_instance(SINGLE)
    rows = compare(instance, methods=["planner", "production"], time_limit_s=3)
    lines = compare_text(instance, rows).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("explanation:"))
    assert all(line.startswith("  ") for line in lines[start + 1:]) and len(lines) - start >= 3
    assert "breakdown (planner − production)" in lines[start + 1]
    assert "decisions changed" in lines[start + 2]


def test_cli_json_rows_keys_and_plot(run_cli, instances_dir, tmp_path) -> None:
    plot = tmp_path / "breakdown.png"
    result = run_cli(["compare", instances_dir / f"{SINGLE}.yaml", "--methods", "planner,one-at-a-time,exhaustive",
                      "--time-limit", "2", "--json", "--plot", plot, "--quiet"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["method"] for r in rows] == ["planner", "production", "one-at-a-time", "exhaustive"]
    for row in rows:
        assert list(row)[:len(KEYS)] == KEYS
    assert rows[-1]["plan"] is None and rows[-1]["reason"].startswith("space too large")
    assert rows[0]["plan"]["placement"]["cross_building"] == "none"  # one building
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["breakdown.png"]  # no temporary file left behind


def test_cli_infeasible_exits_3_with_json_status(run_cli, instances_dir) -> None:
    result = run_cli(["compare", instances_dir / "infeasible-memory-llama3-405b-a100.yaml", "--json", "--quiet"])
    assert result.exit_code == 3
    assert json.loads(result.stdout)["status"] == "infeasible"
    assert result.stderr.startswith("infeasible:")


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--methods", "planner,nope"], 2, "unknown method(s) nope"),
    (["--methods", ","], 2, "(none given)"),
    (["--time-limit", "0"], 2, "--time-limit"),
    (["--plot", "/no/such/dir/x.png"], 2, "does not exist"),
])
def test_cli_usage_errors(run_cli, instances_dir, args: list[str], code: int, message: str) -> None:
    result = run_cli(["compare", instances_dir / f"{SMALL}.yaml", *args])
    assert result.exit_code == code
    assert message in result.stderr


def test_cli_bad_instance_is_an_input_error(run_cli, tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {buildings: []}\njob: {model: llama3-8b}\n")
    result = run_cli(["compare", bad, "--time-limit", "1"])
    assert result.exit_code == 1
    assert str(bad) in result.stderr


def test_method_names_start_with_planner_and_production() -> None:
    assert method_names()[:2] == ["planner", "production"]
    assert len(method_names()) == len(set(method_names())) == 7
