"""`scaleacross-opt sweep`: JSONL + CSV + PNG, resume after SIGKILL, per-point statuses, bad input (issue 11)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

BANDWIDTHS = "cluster.links[*].bandwidth_gbps"


def _lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n"), "no torn last line"
    return [json.loads(line) for line in text.splitlines()]


def test_sweep_writes_jsonl_csv_png_and_resumes(run_cli, small: Path, tmp_path: Path) -> None:
    out, table, plot = tmp_path / "r.jsonl", tmp_path / "r.csv", tmp_path / "r.png"
    args = ["sweep", small, "--vary", f"{BANDWIDTHS}=1600,0", "--out", out, "--csv", table, "--plot", plot,
            "--time-limit", "20", "--workers", "1"]
    result = run_cli(args)
    assert result.exit_code == 0, result.stderr
    records = _lines(out)
    assert [r["params"][BANDWIDTHS] for r in records] == [1600, 0] or len(records) == 2
    by_value = {r["params"][BANDWIDTHS]: r for r in records}
    ok, bad = by_value[1600], by_value[0]
    assert ok["status"] == "ok" and ok["results"][0]["plan"]["tp"] >= 1 and ok["seed"] == 0
    assert bad["status"] == "input_error" and "cluster.links[0].bandwidth_gbps" in bad["reason"]
    rows = list(csv.DictReader(table.open()))
    assert [row[BANDWIDTHS] for row in rows] == ["1600", "0"] and rows[0]["cross_building"] in {"pp", "dp", "none"}
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert "1 ok, 1 input_error" in result.stderr and f"{BANDWIDTHS}=1600: solve" in result.stdout

    again = run_cli(args)  # every point is in the file: nothing is solved again
    assert again.exit_code == 0 and again.stdout == result.stdout
    assert _lines(out) == records

    other_seed = run_cli([*args, "--seed", "1", "--quiet"])  # another seed is another point
    assert other_seed.exit_code == 0 and other_seed.stderr == "" and len(_lines(out)) == 4


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigkill_then_rerun_completes_every_point_once(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-c", "from scaleacross_opt.cli import main; main()", "sweep", str(small),
           "--vary", f"{BANDWIDTHS}=1600,4000,9143", "--out", str(out),
           "--time-limit", "20", "--workers", "1", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_bytes().count(b"\n") >= 1) and proc.poll() is None:
            assert time.monotonic() < deadline, "no point finished within 60 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _group_alive(proc.pid):  # its worker process notices and ends itself
            assert time.monotonic() < deadline, "a worker outlived the killed sweep by 30 s"
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    first = out.read_bytes()
    with out.open("ab") as handle:  # what a kill in the middle of a write would leave
        handle.write(b'{"instance": "')
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    records = _lines(out)
    assert out.read_bytes().startswith(first)  # finished points were kept, not solved again
    assert Counter(r["params"][BANDWIDTHS] for r in records) == {1600: 1, 4000: 1, 9143: 1}
    assert all(r["status"] == "ok" for r in records)


def test_bad_vary_is_a_usage_error(run_cli, small: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    for vary in ["nonsense", f"{BANDWIDTHS}=100..10x2", f"{BANDWIDTHS}=1,1"]:
        result = run_cli(["sweep", small, "--vary", vary, "--out", out])
        assert result.exit_code == 2 and "--vary" in result.stderr, result.stderr
    twice = run_cli(["sweep", small, "--vary", f"{BANDWIDTHS}=1", "--vary", f"{BANDWIDTHS}=2", "--out", out])
    assert twice.exit_code == 2 and "varied twice" in twice.stderr
    assert not out.exists()


def test_unknown_path_is_an_input_error_before_any_solve(run_cli, small: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = run_cli(["sweep", small, "--vary", "cluster.links[4].bandwidth_gbps=1,2", "--vary", "job.batch=1",
                      "--out", out, "--csv", tmp_path / "r.csv"])
    assert result.exit_code == 1 and result.exception is None
    lines = result.stderr.splitlines()
    assert f"{small}: cluster.links[4].bandwidth_gbps: index 4 out of range: cluster.links has 1 element" in lines
    assert any(line.startswith(f"{small}: job.batch: job has no field 'batch'") for line in lines)
    assert not out.exists() and not (tmp_path / "r.csv").exists()


def test_outputs_must_differ_from_the_instance_and_each_other(run_cli, small: Path, tmp_path: Path) -> None:
    same = run_cli(["sweep", small, "--vary", "job.global_batch_size=128", "--out", tmp_path / "r",
                    "--csv", tmp_path / "r"])
    assert same.exit_code == 2 and "also the --out file" in same.stderr
    onto_instance = run_cli(["sweep", small, "--vary", "job.global_batch_size=128", "--out", small])
    assert onto_instance.exit_code == 2 and "input file" in onto_instance.stderr


def test_a_foreign_results_file_is_an_input_error(run_cli, small: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text("hello\n")
    result = run_cli(["sweep", small, "--vary", "job.global_batch_size=128", "--out", out])
    assert result.exit_code == 1 and result.stderr.startswith(f"{out}: line 1: not a sweep record")
    assert out.read_text() == "hello\n"


def test_a_sweep_without_any_plan_fails_with_the_first_reason(run_cli, small: Path, tmp_path: Path) -> None:
    """Every point failed: exit as for its first failure (here an input error, 1), say so, write no CSV or plot."""
    out, table, plot = tmp_path / "r.jsonl", tmp_path / "r.csv", tmp_path / "r.png"
    args = ["sweep", small, "--vary", f"{BANDWIDTHS}=0,-1", "--out", out, "--csv", table, "--plot", plot]
    for _ in range(2):  # the re-run reads both points from the results file and fails alike
        result = run_cli(args)
        assert result.exit_code == 1 and result.exception is None, result.stderr
        assert result.stderr.splitlines()[-1].startswith(
            f"no point succeeded (2 points; results in {out}); the first: {BANDWIDTHS}=0: input_error: "
            f"{small}: cluster.links[0].bandwidth_gbps: ")
        assert [r["status"] for r in _lines(out)] == ["input_error", "input_error"]
        assert not table.exists() and not plot.exists()


@pytest.mark.parametrize(("status", "code"), [("infeasible", 3), ("no_plan_in_time", 5)])
def test_a_sweep_without_any_plan_exits_with_the_code_of_its_first_failure(
        status: str, code: int, run_cli, monkeypatch, small: Path, tmp_path: Path) -> None:
    from scaleacross_opt.capacity import run as run_module

    monkeypatch.setattr(run_module, "run", lambda executor, tasks, workers: iter(
        [task.record(status=status, reason=f"reason {i}") for i, task in enumerate(tasks)]))
    result = run_cli(["sweep", small, "--vary", f"{BANDWIDTHS}=1600,3200", "--out", tmp_path / "r.jsonl", "--quiet"])
    assert result.exit_code == code
    assert result.stderr.endswith(f"the first: {BANDWIDTHS}=1600: {status}: reason 0\n")


def test_methods_compare_at_each_point(run_cli, small: Path, tmp_path: Path) -> None:
    out, table = tmp_path / "r.jsonl", tmp_path / "r.csv"
    result = run_cli(["sweep", small, "--vary", f"{BANDWIDTHS}=9143", "--methods", "planner,production", "--out", out,
                      "--csv", table, "--time-limit", "10", "--quiet"])
    assert result.exit_code == 0, result.stderr
    (record,) = _lines(out)
    assert record["methods"] == ["planner", "production"]
    rows = {row["method"]: row for row in record["results"]}
    assert set(rows) == {"planner", "production"} and rows["production"]["speedup_vs_production_pct"] == 0
    assert rows["planner"]["step_time_s"] <= rows["production"]["step_time_s"]
    assert [row["method"] for row in csv.DictReader(table.open())] == ["planner", "production"]
    unknown = run_cli(["sweep", small, "--vary", f"{BANDWIDTHS}=9143", "--methods", "planner,nope", "--out", out])
    assert unknown.exit_code == 2 and "unknown method(s) nope" in unknown.stderr


def test_each_point_solves_with_the_cpus_it_reserves(monkeypatch, small: Path, tmp_path: Path) -> None:
    """Two workers on this machine's CPUs: every point's CP-SAT runs cpus ÷ 2 threads (at least one)."""
    from scaleacross_opt import load_instance, sweep
    from scaleacross_opt.capacity import run as run_module
    from scaleacross_opt.capacity.executors import available_cpus

    seen = []

    def fake_run(executor, tasks, workers):
        seen.extend((executor, workers, task.threads) for task in tasks)
        return iter([task.record(status="infeasible", reason="not solved in this test") for task in tasks])

    monkeypatch.setattr(run_module, "run", fake_run)
    sweep(load_instance(small), {BANDWIDTHS: [1600, 3200]}, out=tmp_path / "r.jsonl", workers=2, time_limit_s=5)
    expected = max(1, len(available_cpus()) // 2)
    assert seen == [("local", 2, expected), ("local", 2, expected)]
