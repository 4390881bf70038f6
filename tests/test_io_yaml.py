"""YAML numbers as people write them: exponents without a dot are floats (YAML 1.2, JSON), not strings."""

from __future__ import annotations

from pathlib import Path

import yaml

from scaleacross_opt.io import load_instance


def test_exponent_without_a_dot_is_a_float(instances_dir: Path, tmp_path: Path) -> None:
    data = yaml.safe_load((instances_dir / "small-two-buildings-llama3-8b.yaml").read_text(encoding="utf-8"))
    data["cluster"]["links"][0]["bandwidth_gbps"] = 12345.678
    data["cluster"]["links"][0]["latency_us"] = 876.54321
    text = yaml.safe_dump(data).replace("12345.678", "1e5").replace("876.54321", "1.5e2")
    assert "1e5" in text and "1.5e2" in text
    path = tmp_path / "instance.yaml"
    path.write_text(text, encoding="utf-8")
    link = load_instance(path).cluster.links[0]
    assert link.bandwidth_gbps == 1e5 and link.latency_us == 150.0


PARTIAL_PLAN = """
tp: 8
pp: 4
dp: 4
micro_batch_size: 1
schedule: 1f1b
placement:
  cross_building: pp
  buildings:
    - {building: bldg-a, dp_replicas: 4, pp_stages: 2}
    - {building: bldg-b, dp_replicas: 4, pp_stages: 2}
network:
  cross_building: {collective_algorithm: hierarchical, qps_per_connection: 16}
"""


def test_partial_network_and_placement_without_layers_get_defaults(instances_dir: Path, tmp_path: Path) -> None:
    from scaleacross_opt.catalog.network import DEFAULT_TRAFFIC_CLASS
    from scaleacross_opt.io import load_plan

    instance = load_instance(instances_dir / "small-two-buildings-llama3-8b.yaml")
    path = tmp_path / "plan.yaml"
    path.write_text(PARTIAL_PLAN, encoding="utf-8")
    plan = load_plan(path, instance)
    assert plan.placement is not None and plan.placement.layers_per_stage == [8, 8, 8, 8]
    assert plan.network is not None and plan.network.intra_building == DEFAULT_TRAFFIC_CLASS
    cross = plan.network.cross_building
    assert (cross.collective_algorithm.value, cross.qps_per_connection) == ("hierarchical", 16)
    assert cross.load_balancing == DEFAULT_TRAFFIC_CLASS.load_balancing


def test_every_problem_of_a_search_section_is_reported(run_cli, small: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(small.read_text(encoding="utf-8"))
    data["search"] = {"zero_stages": [7], "schedules": ["nope"], "virtual_stages": [0], "qps_per_connection": [0]}
    path = tmp_path / "instance.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli(["validate", path])
    assert result.exit_code == 1
    fields = {line.split(": ")[1] for line in result.stderr.splitlines()}
    assert fields == {"search.zero_stages[0]", "search.schedules[0]", "search.virtual_stages[0]",
                      "search.qps_per_connection[0]"}
    assert "unknown schedule 'nope'; known: 1f1b" in result.stderr
