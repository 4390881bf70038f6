"""Requirement queries: the smallest bandwidth / largest latency within a margin of ideal links (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_opt import InputError, load_instance, requirement
from scaleacross_opt.capacity.paths import parse_path
from scaleacross_opt.capacity.requirement import CurvePoint, _violations, ideal_updates
from scaleacross_opt.spec import bounds as B

SMALL = Path(__file__).resolve().parent.parent / "instances" / "small-two-buildings-llama3-8b.yaml"


def test_bandwidth_requirement_brackets_the_answer(run_cli, tmp_path: Path) -> None:
    # starts from 1,600 Gb/s; the solves below 400 Gb/s run to their limit (far from the 5 % target either way)
    instance = load_instance(SMALL).with_updates({"cluster.links[0].bandwidth_gbps": 1600})
    base = tmp_path / "base.json"
    base.write_text(json.dumps(instance.model_dump(mode="json")))
    plot = tmp_path / "req.png"
    result = run_cli(["requirement", base, "--field", "cluster.links[*].bandwidth_gbps", "--within", "5%",
                      "--precision", "50%", "--time-limit", "6", "--json", "--plot", plot, "--quiet"])
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    value, curve = answer["value"], answer["curve"]
    assert answer["step_time_s"] <= answer["target_step_time_s"] == pytest.approx(answer["ideal_step_time_s"] * 1.05)
    assert answer["plan"]["tp"] >= 1 and answer["monotone"] and answer["violations"] == []
    below = [p for p in curve if p["value"] < value]
    assert below and not any(p["meets_target"] for p in below)  # the value below the answer misses
    assert max(p["value"] for p in below) * 1.5 >= value  # bracketed to --precision
    assert all(p["meets_target"] for p in curve if p["value"] >= value)
    assert plot.read_bytes().startswith(b"\x89PNG")

    text = run_cli(["requirement", base, "--field", "cluster.links[*].bandwidth_gbps", "--precision", "50%",
                    "--time-limit", "6"])
    assert text.exit_code == 0 and text.stdout.startswith(f"cluster.links[*].bandwidth_gbps ≥ {value:.6g}: best step")
    assert "measured curve" in text.stdout and "monotone: the best step is non-increasing in bandwidth" in text.stdout
    assert "ideal links:" in text.stderr  # progress lines


def test_latency_requirement_is_the_largest_tolerable() -> None:
    # from 9.6 ms, where the step is within 5 %; above it solve runs to its (short) time limit
    instance = load_instance(SMALL).with_updates({"cluster.links[0].latency_us": 9600})
    answer = requirement(instance, "cluster.links[0].latency_us", within=0.05, time_limit_s=4, precision=1.0)
    assert answer.value is not None and answer.at_value is not None and answer.at_value.meets_target
    assert all(not p.meets_target for p in answer.curve if p.value > answer.value)
    assert any(p.value > answer.value for p in answer.curve)


def test_ideal_links_are_the_schema_bounds() -> None:
    field = "cluster.links[*].latency_us"
    assert ideal_updates(field, parse_path(field)) == {"cluster.links[*].bandwidth_gbps": B.MAX_BANDWIDTH_GBPS,
                                                       "cluster.links[*].latency_us": B.MIN_LATENCY_US}
    field = "cluster.buildings[0].fabric_latency_us"
    assert ideal_updates(field, parse_path(field)) == {field: B.MIN_LATENCY_US}


def test_monotonicity_violations_are_reported() -> None:
    curve = [CurvePoint(100, 2.0, False, {}), CurvePoint(200, 2.5, False, {}), CurvePoint(400, 1.0, True, {})]
    assert [(a.value, b.value) for a, b in _violations(curve, bandwidth=True)] == [(100, 200)]
    assert [(a.value, b.value) for a, b in _violations(curve, bandwidth=False)] == [(200, 400)]


@pytest.mark.parametrize(("field", "words"), [("job.seq_len", "bandwidth_gbps or latency_us"),
                                              ("cluster.links[7].bandwidth_gbps", "out of range"),
                                              ("cluster.links.bandwidth_gbps", "[*]")])
def test_bad_fields_are_input_errors(run_cli, small: Path, field: str, words: str) -> None:
    with pytest.raises(InputError):
        requirement(load_instance(SMALL), field)
    result = run_cli(["requirement", small, "--field", field])
    assert result.exit_code == 1 and result.exception is None
    assert result.stderr.startswith(f"{small}: {field}: ") and words in result.stderr


@pytest.mark.parametrize("within", ["0", "-5%", "abc", "nan%"])
def test_bad_margins_are_usage_errors(run_cli, small: Path, within: str) -> None:
    result = run_cli(["requirement", small, "--field", "cluster.links[*].bandwidth_gbps", "--within", within])
    assert result.exit_code == 2 and "--within" in result.stderr


def test_an_unset_fabric_latency_starts_from_the_catalog_default() -> None:
    """The shipped small instance leaves ``fabric_latency_us`` unset: the search starts where the model reads it."""
    from scaleacross_opt.catalog import coefficients as co

    field = "cluster.buildings[*].fabric_latency_us"
    assert all(b.fabric_latency_us is None for b in load_instance(SMALL).cluster.buildings)
    answer = requirement(load_instance(SMALL), field, within=0.05, time_limit_s=2, precision=1.0)
    assert answer.curve[0].value == co.DEFAULT_FABRIC_LATENCY_US
