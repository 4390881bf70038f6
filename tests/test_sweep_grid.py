"""Sweep building blocks: --vary parsing, the Cartesian product, the JSON Lines store (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_opt import InputError
from scaleacross_opt.capacity.grid import Axis, geometric, parse_axis, points
from scaleacross_opt.capacity.store import MethodResult, ResultStore, SweepRecord


def test_value_lists_read_scalars_like_yaml() -> None:
    assert parse_axis("job.global_batch_size=128,256") == Axis("job.global_batch_size", (128, 256))
    assert parse_axis("cluster.links[*].latency_us=1e3, 2.5").values == (1000.0, 2.5)
    assert parse_axis("cluster.buildings[1].gpu=H100-SXM-80GB,B200").values == ("H100-SXM-80GB", "B200")


def test_geometric_ranges() -> None:
    assert parse_axis("cluster.links[0].bandwidth_gbps=100..1600x2").values == (100, 200, 400, 800, 1600)
    assert parse_axis("a=0.5..2x2").values == (0.5, 1.0, 2.0)
    assert parse_axis("a=3..100x2").values == (3, 6, 12, 24, 48, 96)  # stops at the last value ≤ STOP
    assert geometric(1e3, 1e5, 10) == [1000.0, 10000.0, 100000.0]  # rounding does not drop the end


@pytest.mark.parametrize("spec", ["a", "a=", "a=1,,2", "a=1,1", "a=1..0x2", "a=1..10x1", "a=x..10x2", "a=0..10x2",
                                  "[0]=1", "a b=1", "a=1..1e9x1.0001"])
def test_bad_axes_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_axis(spec)


def test_points_are_the_cartesian_product_first_axis_slowest() -> None:
    grid = points([Axis("a", (1, 2)), Axis("b", ("x", "y", "z"))])
    assert len(grid) == 6 and grid[0] == {"a": 1, "b": "x"} and grid[3] == {"a": 2, "b": "x"}


def _record(value: int) -> SweepRecord:
    return SweepRecord(instance="d", params={"a": value}, seed=0, time_limit_s=1.0, methods=None, status="ok",
                       results=[MethodResult(method="solve", step_time_s=1.0, plan={"placement": {"cross_building":
                                                                                               "pp"}})])


def test_store_appends_whole_lines_and_reloads_them(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "r.jsonl")
    assert store.load() == {}
    store.append(_record(1))
    store.append(_record(2))
    store.append(_record(1))  # a repeated point (two sweeps on one file): the first record wins
    loaded = store.load()
    assert [r.params["a"] for r in loaded.values()] == [1, 2]
    assert next(iter(loaded.values())).results[0].cross_building == "pp"
    assert all(json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines())


def test_store_cuts_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    store = ResultStore(path)
    store.append(_record(1))
    with path.open("ab") as handle:
        handle.write(b'{"instance": "d", "par')  # a write cut short by a kill
    assert list(store.load()) == [_record(1).key]
    assert path.read_text().endswith("}\n") and len(path.read_text().splitlines()) == 1
    store.append(_record(2))
    assert len(store.load()) == 2


def test_store_refuses_a_file_it_did_not_write(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"not": "a record"}\n')
    with pytest.raises(InputError) as caught:
        ResultStore(path).load()
    assert caught.value.issues[0].field == "line 1" and "not a sweep record" in caught.value.issues[0].message
