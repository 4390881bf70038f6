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
