"""The CLI commands end to end on the small instance: output files, machine output, usage errors.

Solves use a short ``--time-limit``; estimate / simulate use a hand-written plan so they do not
depend on the solver.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scaleacross_opt import cli


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") or p.suffix == ".tmp")


# ----------------------------------------------------------------------------- estimate / simulate

@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_text_report_shows_plan_and_units(command: str, run_cli, small: Path, bare_plan: Path) -> None:
    result = run_cli([command, small, "--plan", bare_plan])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("plan           tp=2 cp=1 pp=1 dp=64")
    assert "placement      dp across buildings: bldg-a 32 replicas × 1 stage," in out  # the default filled in
    assert "network        intra:" in out and "cross:" in out
    assert "_s " not in out, "breakdown labels carry the unit once, as ' s'"
    assert "\n  compute " in out and "\n  exposed_dp " in out
    assert "Traceback" not in out + result.stderr


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_json_report_round_trips_as_a_plan(command: str, run_cli, small: Path, bare_plan: Path,
                                           tmp_path: Path) -> None:
    result = run_cli([command, small, "--plan", bare_plan, "--json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["plan"]["placement"]["cross_building"] == "dp"
    assert payload["plan"]["network"] is not None
    assert 0 < payload["mfu"] <= 1 and payload["step_time_s"] > 0
    replay = tmp_path / "report.json"
    replay.write_text(result.stdout, encoding="utf-8")
    again = run_cli([command, small, "--plan", replay, "--json"])
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["step_time_s"] == payload["step_time_s"]


def test_simulate_trace_is_chrome_trace(run_cli, small: Path, bare_plan: Path, tmp_path: Path) -> None:
    trace = tmp_path / "out" / "t.json"
    trace.parent.mkdir()
    result = run_cli(["simulate", small, "--plan", bare_plan, "--json", "--trace", trace])
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)  # stdout holds only the JSON report
    assert f"trace written to {trace}" in result.stderr
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert {e["name"] for e in events if e["ph"] == "M"} >= {"process_name", "thread_name"}
    assert leftovers(trace.parent) == []


def test_trace_write_failure_leaves_nothing(run_cli, small: Path, bare_plan: Path, tmp_path: Path,
                                            monkeypatch) -> None:
    def disk_full(self: Path, target: Path) -> None:  # the temporary file is complete, the rename fails
        raise OSError(28, "No space left on device", str(target))

    monkeypatch.setattr(Path, "replace", disk_full)
    trace = tmp_path / "t.json"
    result = run_cli(["simulate", small, "--plan", bare_plan, "--trace", trace])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"{trace}: cannot write: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]


def test_write_atomic_failure_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    def fail(self: Path, target: Path) -> None:
        raise OSError(5, "Input/output error", str(target))

    monkeypatch.setattr(Path, "replace", fail)
    with pytest.raises(SystemExit) as exit_info:
        cli._write_atomic(tmp_path / "plan.json", "{}\n")
    assert exit_info.value.code == cli.EXIT_INVALID
    assert list(tmp_path.iterdir()) == []


def test_plan_for_another_instance_is_an_input_error(run_cli, instances_dir: Path, bare_plan: Path) -> None:
    result = run_cli(["estimate", instances_dir / "single-building-llama3-70b.yaml", "--plan", bare_plan])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"{bare_plan}: <root>: plan degrees tp·cp·pp·dp = 2·1·1·64 = 128 GPUs ≠ the job's ")


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_directory_as_input_is_an_input_error(command: str, run_cli, small: Path, tmp_path: Path) -> None:
    result = run_cli([command, small, "--plan", tmp_path])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{tmp_path}: <root>: cannot read file")


# ----------------------------------------------------------------------------- output paths (checked first)

@pytest.mark.parametrize("where", ["missing-dir", "directory", "the-instance"])
def test_solve_out_checked_before_solving(where: str, run_cli, small: Path, tmp_path: Path) -> None:
    out = {"missing-dir": tmp_path / "nope" / "plan.json", "directory": tmp_path, "the-instance": small}[where]
    before = small.read_bytes()
    result = run_cli(["solve", small, "--time-limit", "30", "--out", out])
    assert result.exit_code == 2, result.stderr
    assert "--out" in result.stderr
    assert "CP-SAT" not in result.stderr, "the solve must not start"
    assert small.read_bytes() == before
    assert not (tmp_path / "nope").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["missing-dir", "directory", "the-plan"])
def test_simulate_trace_checked_before_simulating(where: str, run_cli, small: Path, bare_plan: Path,
                                                  tmp_path: Path, bare_plan_fields: dict) -> None:
    trace = {"missing-dir": tmp_path / "nope" / "t.json", "directory": tmp_path, "the-plan": bare_plan}[where]
    result = run_cli(["simulate", small, "--plan", bare_plan, "--trace", trace])
    assert result.exit_code == 2, result.stderr
    assert "--trace" in result.stderr
    assert yaml.safe_load(bare_plan.read_text(encoding="utf-8")) == bare_plan_fields


UNWRITABLE_DIR = Path("/proc")  # a directory os.access calls writable for root, where no file can be created


@pytest.mark.skipif(not (UNWRITABLE_DIR / "self").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize(("command", "option"), [
    ("solve", "--out"), ("simulate", "--trace"), ("compare", "--plot"), ("sweep", "--out"), ("sweep", "--csv"),
    ("sweep", "--plot"), ("requirement", "--plot")])
def test_unwritable_output_directory_is_refused_before_any_work(command: str, option: str, run_cli, small: Path,
                                                                 bare_plan: Path, tmp_path: Path) -> None:
    extra = {"simulate": ["--plan", bare_plan], "sweep": ["--vary", "job.global_batch_size=128"],
             "requirement": ["--field", "cluster.links[*].bandwidth_gbps"]}.get(command, [])
    if command == "sweep" and option != "--out":
        extra += ["--out", tmp_path / "r.jsonl"]
    if command != "simulate":
        extra += ["--time-limit", "1", "--quiet"]
    result = run_cli([command, small, *extra, option, UNWRITABLE_DIR / "x.json"])
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert f"'{option}'" in result.stderr and f"directory '{UNWRITABLE_DIR}' is not writable" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"], "nothing written, not even the --out file"


@pytest.mark.parametrize("args", [["--time-limit", "nan"], ["--seed", "-1"], ["--seed", "99999999999999999999"],
                                  ["--top-k", "0"]])
def test_solve_bad_option_values_exit_2(args: list[str], run_cli, small: Path) -> None:
    result = run_cli(["solve", small, *args])
    assert result.exit_code == 2
    assert "Invalid value" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_help_lists_exit_codes(run_cli) -> None:
    assert "Exit codes: 0 ok, 1 invalid input, 2 usage, 3 infeasible, 4 internal error" in run_cli(["--help"]).stdout


# ----------------------------------------------------------------------------- validate: kind detection

def test_validate_plan_with_stray_key_is_checked_as_a_plan(run_cli, small: Path, tmp_path: Path,
                                                          bare_plan_fields: dict) -> None:
    path = tmp_path / "named-plan.yaml"
    path.write_text(yaml.safe_dump({"name": "my-plan", **bare_plan_fields}), encoding="utf-8")
    result = run_cli(["validate", "--instance", small, path])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"{path}: name: Extra inputs are not permitted"]


def test_validate_unknown_document_is_one_line(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "notes.yaml"
    path.write_text("owner: me\nbudget: 3\n", encoding="utf-8")
    result = run_cli(["validate", path])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: <root>: not an instance, model or plan file")
    assert "owner, budget" in lines[0]


def test_validate_plan_without_instance_says_schema_only(run_cli, bare_plan: Path, small: Path) -> None:
    alone = run_cli(["validate", bare_plan])
    assert alone.exit_code == 0
    assert f"{bare_plan}: ok (plan, schema only" in alone.stdout
    checked = run_cli(["validate", "--instance", small, bare_plan])
    assert checked.exit_code == 0
    assert f"{bare_plan}: ok (plan)" in checked.stdout


# ----------------------------------------------------------------------------- solve end to end

def test_solve_json_out_feeds_simulate_and_estimate(run_cli, small: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run_cli(["solve", small, "--time-limit", "4", "--json", "--out", out])
    if result.exit_code == 3 and "time limit" in result.stderr:
        pytest.skip("no plan found within the short time limit on this machine")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)  # progress goes to stderr only
    assert f"plan written to {out}" in result.stderr
    assert json.loads(out.read_text(encoding="utf-8")) == payload["plan"]
    assert leftovers(tmp_path) == []
    for command in ("simulate", "estimate"):
        replay = run_cli([command, small, "--plan", out, "--json"])
        assert replay.exit_code == 0, replay.stderr
        assert json.loads(replay.stdout)["plan"] == payload["plan"]


def test_validate_plan_that_does_not_fit_memory_fails(run_cli, small: Path, tmp_path: Path,
                                                     bare_plan_fields: dict) -> None:
    """Against an instance, validate runs the exact memory model: 8B with unsharded Adam state is ~16 B
    per parameter, far above one GPU."""
    path = tmp_path / "too-big.yaml"
    path.write_text(yaml.safe_dump({**bare_plan_fields, "tp": 1, "dp": 128, "micro_batch_size": 1, "zero_stage": 0}),
                    encoding="utf-8")
    result = run_cli(["validate", "--instance", small, path])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{path}: placement: needs ") and "does not fit memory" in result.stderr


def test_output_files_get_the_permissions_of_a_plain_write(tmp_path: Path) -> None:
    """write_atomic goes through mkstemp (0600) but leaves a new file at 0666 less the umask and keeps
    the mode of a file it replaces."""
    import os
    import stat

    from scaleacross_opt.io import write_atomic

    umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.json"
        write_atomic(fresh, "{}")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        shared = tmp_path / "shared.json"
        shared.write_text("old", encoding="utf-8")
        shared.chmod(0o664)
        write_atomic(shared, "{}")
        assert stat.S_IMODE(shared.stat().st_mode) == 0o664 and shared.read_text(encoding="utf-8") == "{}"
    finally:
        os.umask(umask)


# ----------------------------------------------------------------------------- list

@pytest.mark.parametrize(("kind", "expected"), [("gpus", "H100-SXM-80GB"), ("models", "llama3-405b"),
                                                ("schedules", "dualpipe")])
def test_list_names_the_catalog(run_cli, kind: str, expected: str) -> None:
    result = run_cli(["list", kind])
    assert result.exit_code == 0, result.stderr
    assert any(line.startswith(expected + " ") for line in result.stdout.splitlines())


def test_unknown_model_error_lists_the_known_models(run_cli, small: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(small.read_text(encoding="utf-8"))
    data["job"]["model"] = "llama9-1t"
    path = tmp_path / "instance.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli(["validate", path])
    assert result.exit_code == 1
    assert "unknown model 'llama9-1t'" in result.stderr and "known: " in result.stderr
    assert "llama3-405b" in result.stderr


def test_swapped_arguments_are_named(run_cli, small: Path, bare_plan: Path) -> None:
    swapped = run_cli(["simulate", bare_plan, "--plan", small])
    assert swapped.exit_code == 1
    assert "plan.yaml is a plan, expected an instance (arguments swapped?)" in swapped.stderr
    plan_as_instance = run_cli(["estimate", small, "--plan", small])
    assert plan_as_instance.exit_code == 1
    assert "is an instance, expected a plan (arguments swapped?)" in plan_as_instance.stderr
