"""The Ray executor on a local 2-CPU Ray instance: same seeds, same plans as the local process pool (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaleacross_opt import load_instance, sweep

ray = pytest.importorskip("ray")

SMALL = Path(__file__).resolve().parent.parent / "instances" / "small-two-buildings-llama3-8b.yaml"
VARY = {"cluster.links[*].bandwidth_gbps": [1600, 9143]}  # both points converge (status optimal) in ~1 s


def test_ray_and_local_give_the_same_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # start a local Ray instance of 2 CPUs
    instance = load_instance(SMALL)
    on_ray = sweep(instance, VARY, out=tmp_path / "ray.jsonl", executor="ray", workers=2, time_limit_s=30)
    assert not ray.is_initialized(), "the executor shuts Ray down"
    local = sweep(instance, VARY, out=tmp_path / "local.jsonl", executor="local", workers=2, time_limit_s=30)
    assert [r.status for r in on_ray] == ["ok", "ok"]
    for a, b in zip(on_ray, local, strict=True):
        assert a.params == b.params and a.results[0].status == b.results[0].status == "optimal"
        assert a.results[0].plan == b.results[0].plan and a.results[0].step_time_s == b.results[0].step_time_s
