"""Bad inputs give exit code 1 and one `FILE: field: message` line per problem, never a traceback.

The instance corpus lives in ``tests/bad_instances/`` (one problem per file) with the expected field
path of each file in ``expected.yaml``. Plan files are checked against an instance with
``validate --instance``; they are written to a temporary directory from the dicts below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

BAD_DIR = Path(__file__).resolve().parent / "bad_instances"
EXPECTED: dict[str, str] = yaml.safe_load((BAD_DIR / "expected.yaml").read_text(encoding="utf-8"))

# Corpus files that expose a bug in code these tests do not own; strict, so a fix makes them fail
# loudly and the marker gets removed.

FIELD = r"(?P<field><root>|[A-Za-z_][\w.\[\]+-]*)"


def assert_issue_lines(stderr: str, file: str) -> list[str]:
    """Every stderr line is `FILE: field: message`; return the fields."""
    lines = stderr.splitlines()
    assert lines, "no message on stderr"
    pattern = re.compile(rf"^{re.escape(file)}: {FIELD}: \S.*$")
    fields = []
    for line in lines:
        match = pattern.match(line)
        assert match, f"stderr line not of the form `FILE: field: message`: {line!r}"
        fields.append(match["field"])
    return fields


def assert_clean_failure(result: Any, file: str, expected_field: str, exact: bool = False) -> None:
    """Exit 1, no traceback, one well-formed line per problem, ``expected_field`` among them."""
    assert result.exception is None, f"unexpected exception {result.exception!r}"
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exit_code == 1, f"exit {result.exit_code}; stderr:\n{result.stderr}"
    fields = assert_issue_lines(result.stderr, file)
    if exact:
        assert expected_field in fields, f"{expected_field!r} not in {fields}"
    else:
        assert any(expected_field in f for f in fields), f"{expected_field!r} not in {fields}"


# ----------------------------------------------------------------------------- instance corpus


def corpus_params() -> list[Any]:
    return sorted(EXPECTED)


def test_corpus_is_complete() -> None:
    files = {p.name for p in BAD_DIR.iterdir() if p.is_file() and p.name != "expected.yaml"}
    assert files == set(EXPECTED), "every bad file needs an expected.yaml entry and vice versa"
    assert len(files) >= 24
    assert sum(name.endswith(".json") for name in files) >= 3


@pytest.mark.parametrize("name", corpus_params())
def test_bad_instance(name: str, run_cli) -> None:
    path = str(BAD_DIR / name)
    result = run_cli(["validate", path])
    assert_clean_failure(result, path, EXPECTED[name])


def test_all_problems_reported_not_just_the_first(run_cli) -> None:
    paths = [str(BAD_DIR / n) for n in ("zero-latency.yaml", "unknown-gpu.yaml", "zero-seq-len.yaml")]
    result = run_cli(["validate", *paths])
    assert result.exit_code == 1
    for path in paths:
        assert f"{path}: " in result.stderr


def test_missing_file_is_an_input_error(run_cli, tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    assert_clean_failure(run_cli(["validate", path]), path, "<root>", exact=True)


def test_multiple_schema_errors_in_one_file(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "two-errors.yaml"
    path.write_text(
        "cluster:\n  buildings:\n    - {name: a, gpu: H100-SXM-80GB, num_gpus: 0}\n"
        "job: {model: llama3-8b, seq_len: 0, global_batch_size: 128}\n", encoding="utf-8")
    result = run_cli(["validate", str(path)])
    assert_clean_failure(result, str(path), "cluster.buildings[0].num_gpus", exact=True)
    assert_clean_failure(result, str(path), "job.seq_len", exact=True)


EMPTY_DOCUMENTS = {"empty.yaml": "", "blank.json": " \n\n", "comments.yaml": "# to be written\n---\n"}


@pytest.mark.parametrize("name", sorted(EMPTY_DOCUMENTS))
@pytest.mark.parametrize("role", ["instance", "plan", "validate"])
def test_empty_file_is_named_empty(name: str, role: str, run_cli, tmp_path: Path) -> None:
    """An empty instance or plan file (nothing but whitespace or comments) says so, in every command."""
    empty = tmp_path / name
    empty.write_text(EMPTY_DOCUMENTS[name], encoding="utf-8")
    other = write(tmp_path / ("plan.yaml" if role == "instance" else "instance.yaml"),
                  plan() if role == "instance" else TWO_BUILDINGS)
    args = {"instance": ["estimate", empty, "--plan", other], "plan": ["estimate", other, "--plan", empty],
            "validate": ["validate", empty]}[role]
    result = run_cli(args)
    assert_clean_failure(result, str(empty), "<root>", exact=True)
    assert result.stderr == f"{empty}: <root>: the file is empty: expected a JSON/YAML object (a mapping of fields)\n"


# ----------------------------------------------------------------------------- plans vs an instance

TWO_BUILDINGS = {  # 2 × 64 H100, Llama 3 8B (32 layers, 32 heads, 8 KV heads), 128 sequences
    "cluster": {
        "buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 64},
                      {"name": "b", "gpu": "H100-SXM-80GB", "num_gpus": 64}],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 9143, "latency_us": 150}],
    },
    "job": {"model": "llama3-8b", "seq_len": 8192, "global_batch_size": 128},
}

ODD_HEADS = {  # 64 H100, inline model with 20 heads (not divisible by tp=8), 4 KV heads
    "cluster": {"buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 64}]},
    "job": {
        "model": {"name": "odd-heads", "layers": 24, "hidden_size": 2560, "ffn_hidden_size": 6912,
                  "num_heads": 20, "num_kv_heads": 4, "vocab_size": 32000},
        "seq_len": 4096, "global_batch_size": 64,
    },
}

TRAFFIC = {"collective_algorithm": "ring", "load_balancing": "ecmp", "congestion_control": "dcqcn",
           "loss_recovery": "go_back_n", "qps_per_connection": 1, "window_kib_per_qp": 4096}


def plan(**fields: Any) -> dict[str, Any]:
    """A TP8 PP2 DP8 1F1B plan for TWO_BUILDINGS, with ``fields`` overridden."""
    return {"tp": 8, "pp": 2, "dp": 8, "micro_batch_size": 1, "schedule": "1f1b", **fields}


def dp_placement(*shares: tuple[str, int, int], layers: list[int] | None = None,
                 mode: str = "dp") -> dict[str, Any]:
    return {"cross_building": mode,
            "buildings": [{"building": b, "dp_replicas": r, "pp_stages": s} for b, r, s in shares],
            "layers_per_stage": layers or [16, 16]}


def write(path: Path, data: dict[str, Any]) -> str:
    text = json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return str(path)


def check_plan_file(run_cli, tmp_path: Path, instance: dict[str, Any], plan_data: dict[str, Any],
                    suffix: str = ".json") -> tuple[Any, str]:
    instance_path = write(tmp_path / "instance.yaml", instance)
    plan_path = write(tmp_path / f"plan{suffix}", plan_data)
    return run_cli(["validate", "--instance", instance_path, plan_path]), plan_path


# (instance, plan, expected field, message fragment); these need no registered schedule: the
# degree checks report their problem whatever the schedule registry holds.
DEGREE_CASES = {
    "product-not-gpus": (TWO_BUILDINGS, plan(dp=4), "<root>", "tp·cp·pp·dp = 8·1·2·4 = 64 GPUs ≠ the job's 128"),
    "heads-not-divisible-by-tp": (ODD_HEADS, plan(dp=8, pp=1), "tp", "num_heads=20 is not divisible by tp=8"),
    "layers-fewer-than-pp-times-v": (TWO_BUILDINGS, plan(tp=1, pp=64, dp=2), "pp", "layers=32"),
    "hierarchical-intra-building": (
        TWO_BUILDINGS,
        plan(network={"intra_building": {**TRAFFIC, "collective_algorithm": "hierarchical"},
                      "cross_building": TRAFFIC}),
        "network.intra_building.collective_algorithm", "hierarchical"),
}

# These reach the placement checks, which run only once the degrees (incl. the schedule) are valid.
PLACEMENT_CASES = {
    "tp-exceeds-nvlink-domain": (TWO_BUILDINGS, plan(tp=16, pp=1, dp=8), "tp", "NVLink domain"),
    "replicas-do-not-add-up": (
        TWO_BUILDINGS, plan(placement=dp_placement(("a", 4, 2), ("b", 2, 2))),
        "placement.buildings", "expected dp=8"),
    "stages-do-not-add-up": (
        TWO_BUILDINGS,
        plan(pp=4, dp=4, placement=dp_placement(("a", 4, 2), ("b", 4, 1), mode="pp", layers=[8, 8, 8, 8])),
        "placement.buildings[0].pp_stages", "expected pp=4"),
    "layers-do-not-add-up": (
        TWO_BUILDINGS, plan(placement=dp_placement(("a", 4, 2), ("b", 4, 2), layers=[16, 15])),
        "placement.layers_per_stage", "model has 32 layers"),
    "building-over-capacity": (
        TWO_BUILDINGS, plan(placement=dp_placement(("a", 6, 2), ("b", 2, 2))),
        "placement.buildings[0]", "has 64"),
    "unknown-building": (
        TWO_BUILDINGS, plan(placement=dp_placement(("a", 4, 2), ("z", 4, 2))),
        "placement.buildings[1].building", "unknown building 'z'"),
    "group-outside-pp-dp": (
        TWO_BUILDINGS,
        plan(placement={**dp_placement(("a", 4, 2), ("b", 4, 2)),
                        "buildings": [{"building": "a", "dp_replicas": 4, "pp_stages": 2},
                                      {"building": "b", "dp_replicas": 4, "pp_stages": 2, "group": 3}]}),
        "placement.buildings[1].group", "pp+dp only"),
}


@pytest.mark.parametrize("case", sorted(DEGREE_CASES))
def test_bad_plan_degrees(case: str, run_cli, tmp_path: Path) -> None:
    instance, plan_data, field, fragment = DEGREE_CASES[case]
    result, plan_path = check_plan_file(run_cli, tmp_path, instance, plan_data)
    assert_clean_failure(result, plan_path, field, exact=True)
    assert fragment in result.stderr


@pytest.mark.parametrize("case", sorted(PLACEMENT_CASES))
def test_bad_plan_placement(case: str, run_cli, tmp_path: Path, one_f_one_b: str) -> None:
    instance, plan_data, field, fragment = PLACEMENT_CASES[case]
    result, plan_path = check_plan_file(run_cli, tmp_path, instance, plan_data, suffix=".yaml")
    assert_clean_failure(result, plan_path, field, exact=True)
    assert fragment in result.stderr
    assert set(assert_issue_lines(result.stderr, plan_path)) == {field}, "each case should trip one check"


def test_good_plan_passes(run_cli, tmp_path: Path, one_f_one_b: str) -> None:
    placement = dp_placement(("a", 4, 2), ("b", 4, 2))
    result, plan_path = check_plan_file(run_cli, tmp_path, TWO_BUILDINGS, plan(placement=placement))
    assert result.exit_code == 0, result.stderr
    assert f"{plan_path}: ok (plan)" in result.stdout


def test_solver_output_wrapper_is_accepted(run_cli, tmp_path: Path, one_f_one_b: str) -> None:
    result, _ = check_plan_file(run_cli, tmp_path, TWO_BUILDINGS, {"plan": plan(), "step_time_s": 1.0})
    assert result.exit_code == 0, result.stderr


def test_plan_schema_error_without_instance(run_cli, tmp_path: Path) -> None:
    path = write(tmp_path / "plan.yaml", plan(tp=0, pipeline="1f1b"))
    result = run_cli(["validate", path])
    assert_clean_failure(result, path, "tp", exact=True)
    assert_clean_failure(result, path, "pipeline", exact=True)


def test_plan_unknown_schedule(run_cli, tmp_path: Path) -> None:
    result, plan_path = check_plan_file(run_cli, tmp_path, TWO_BUILDINGS, plan(schedule="bogus-schedule"))
    assert_clean_failure(result, plan_path, "schedule", exact=True)


def test_bad_instance_behind_a_plan(run_cli, tmp_path: Path) -> None:
    instance_path = str(BAD_DIR / "zero-latency.yaml")
    plan_path = write(tmp_path / "plan.json", plan())
    result = run_cli(["validate", "--instance", instance_path, plan_path])
    assert_clean_failure(result, instance_path, "cluster.links[0].latency_us", exact=True)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["list", "gpus"], ["list", "schedules"], ["schema", "plan"]])
def test_output_that_cannot_be_written_is_one_line_not_a_traceback(args: list[str]) -> None:
    """stdout on a full device: exit 1 and 'cannot write output', like validate and estimate."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "scaleacross_opt", *args], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == 1
    assert "cannot write output" in done.stderr and "Traceback" not in done.stderr
