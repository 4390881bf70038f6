"""Schemas and shipped data: models and instances load, round-trip, export documented JSON Schema;
multi-hop routes; default placements pass the independent plan checks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from scaleacross_opt.io import load_instance, load_model
from scaleacross_opt.plan_defaults import default_placement, even_layers, fill_defaults
from scaleacross_opt.schedules import schedule_names
from scaleacross_opt.schema_export import SCHEMAS, json_schema
from scaleacross_opt.spec import CrossBuilding, GpuSpec, Instance, ModelSpec, Plan
from scaleacross_opt.validation.plan_checks import check_network, check_placement, check_plan

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_FILES = sorted((REPO_ROOT / "models").glob("*.yaml"))
INSTANCE_FILES = sorted((REPO_ROOT / "instances").glob("*.yaml"))


def schedules_registered(*names: str) -> bool:
    """True when every schedule in ``names`` is registered (the schedules package may still be filling)."""
    return set(names) <= set(schedule_names())


def instance_param(path: Path) -> Any:
    """An instance file as a test parameter, skipped while its restricted schedules are not registered."""
    schedules = (yaml.safe_load(path.read_text(encoding="utf-8")).get("search") or {}).get("schedules") or []
    if schedules and not schedules_registered(*schedules):
        reason = f"{path.name} restricts schedules to {schedules}, not all registered yet"
        return pytest.param(path, id=path.stem, marks=pytest.mark.skip(reason=reason))
    return pytest.param(path, id=path.stem)


INSTANCE_PARAMS = [instance_param(p) for p in INSTANCE_FILES]


# ----------------------------------------------------------------------------- shipped data


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_shipped_model_loads(path: Path) -> None:
    model = load_model(path)
    assert model.name == path.stem
    assert model.source, "every model cites where its architecture comes from"


@pytest.mark.parametrize("path", INSTANCE_PARAMS)
def test_shipped_instance_loads(path: Path) -> None:
    instance = load_instance(path)
    assert instance.name == path.stem
    assert isinstance(instance.job.model, ModelSpec)
    assert all(isinstance(b.gpu, GpuSpec) for b in instance.cluster.buildings)
    assert all(b.num_gpus % b.gpus_per_node == 0 for b in instance.cluster.buildings)
    assert path.read_text(encoding="utf-8").startswith("#"), "header comment deriving the numbers"


@pytest.mark.parametrize("path", INSTANCE_PARAMS)
def test_instance_round_trip(path: Path) -> None:
    instance = load_instance(path)
    dumped = instance.model_dump(mode="json")
    again = Instance.model_validate(dumped)
    assert again == instance
    assert again.model_dump(mode="json") == dumped
    assert Instance.model_validate_json(json.dumps(dumped)) == instance


def test_instances_span_the_design_points(instances_dir: Path) -> None:
    docs = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in instances_dir.glob("*.yaml")}
    assert len(docs) >= 9
    latencies = {stem: [link["latency_us"] for link in d["cluster"].get("links", [])]
                 for stem, d in docs.items()}
    assert any(lat and max(lat) >= 20_000 for lat in latencies.values()), "a cross-region instance"
    assert any(lat and 1_000 <= max(lat) <= 2_000 for lat in latencies.values()), "a metro instance"
    assert any(len(d["cluster"]["buildings"]) >= 5 for d in docs.values()), "the 5-building fabric"
    assert any(len({b["gpu"] for b in d["cluster"]["buildings"]}) > 1 for d in docs.values()), "heterogeneous"
    assert any(stem.startswith("small-") and d.get("search") for stem, d in docs.items()), "an enumerable one"


def test_five_building_fabric_has_100k_gpus(load_shipped_instance) -> None:
    instance = load_shipped_instance("five-buildings-llama4-fabric-llama3-405b")
    assert len(instance.cluster.buildings) == 5
    assert instance.cluster.total_gpus >= 100_000
    assert instance.job.model_spec.name == "llama3-405b"


def test_infeasible_instance_is_valid_but_cannot_hold_the_weights(load_shipped_instance) -> None:
    instance = load_shipped_instance("infeasible-memory-llama3-405b-a100")
    model = instance.job.model_spec
    h, f = model.hidden_size, model.ffn_hidden_size
    attention = 2 * h * h + 2 * h * model.num_kv_heads * model.head_dim_resolved
    params = model.layers * (attention + 3 * h * f) + 2 * model.vocab_size * h
    total_hbm_bytes = sum(b.num_gpus * b.gpu_spec.hbm_gib for b in instance.cluster.buildings) * 2**30
    assert 2 * params > total_hbm_bytes  # bf16 weights alone exceed all HBM of the cluster


# ----------------------------------------------------------------------------- JSON Schema


def _walk(node: Any, where: str, missing: list[str]) -> None:
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            if "description" not in prop:
                missing.append(f"{where}.{name}")
        for key, value in node.items():
            _walk(value, f"{where}/{key}", missing)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _walk(item, f"{where}[{i}]", missing)


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_json_schema_is_documented(kind: str) -> None:
    schema = json.loads(json.dumps(json_schema(kind)))
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["type"] == "object" and schema["properties"]
    missing: list[str] = []
    _walk(schema, kind, missing)
    assert not missing, f"properties without a description: {missing}"
    for name, definition in schema.get("$defs", {}).items():
        assert definition.get("description"), f"definition {name} has no description"


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_json_schema_is_valid_draft_2020_12(kind: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(json_schema(kind))


def test_json_schema_accepts_shipped_instance(instances_dir: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    path = instances_dir / "two-buildings-campus-llama3-405b.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.validate(data, json_schema("instance"))


# ----------------------------------------------------------------------------- routes


def test_multi_hop_route_on_chain(load_shipped_instance) -> None:
    cluster = load_shipped_instance("chain-four-buildings-mixtral-8x22b").cluster
    assert len(cluster.links) == 3  # a chain, not a full mesh
    route = cluster.route("bldg-a", "bldg-d")
    links = {frozenset((link.a, link.b)): link for link in cluster.links}
    hops = [links[frozenset(p)] for p in (("bldg-a", "bldg-b"), ("bldg-b", "bldg-c"), ("bldg-c", "bldg-d"))]
    assert route.buildings == ("bldg-a", "bldg-b", "bldg-c", "bldg-d")
    assert route.bandwidth_gbps == min(h.bandwidth_gbps for h in hops)  # bottleneck
    assert route.latency_us == pytest.approx(sum(h.latency_us for h in hops))  # summed
    assert route.loss_rate == pytest.approx(1 - math.prod(1 - h.loss_rate for h in hops))  # combined
    assert route.loss_rate > 0
    reverse = cluster.route("bldg-d", "bldg-a")
    assert reverse.buildings == tuple(reversed(route.buildings))
    assert (reverse.bandwidth_gbps, reverse.latency_us) == (route.bandwidth_gbps, route.latency_us)


def test_route_one_hop_and_self(load_shipped_instance) -> None:
    cluster = load_shipped_instance("chain-four-buildings-mixtral-8x22b").cluster
    one = cluster.route("bldg-b", "bldg-c")
    assert one.buildings == ("bldg-b", "bldg-c")
    assert (one.bandwidth_gbps, one.latency_us) == (117029, 160)
    assert one.loss_rate == pytest.approx(1e-6)
    same = cluster.route("bldg-c", "bldg-c")
    assert same.latency_us == 0 and same.loss_rate == 0 and same.bandwidth_gbps == math.inf


def test_route_prefers_lower_latency_over_fewer_hops() -> None:
    cluster = Instance.model_validate(_instance_dict([64, 64, 64], links=[
        ("a", "b", 1000, 500.0), ("a", "c", 1000, 100.0), ("c", "b", 2000, 100.0)])).cluster
    route = cluster.route("a", "b")
    assert route.buildings == ("a", "c", "b")
    assert route.latency_us == 200 and route.bandwidth_gbps == 1000


def test_a_copied_cluster_routes_over_its_own_links() -> None:
    """Routes and the graph are cached per cluster; a copy with other links does not inherit them."""
    cluster = Instance.model_validate(_instance_dict([64, 64, 64], links=[
        ("a", "b", 1000, 500.0), ("a", "c", 1000, 100.0), ("c", "b", 2000, 100.0)])).cluster
    assert cluster.route("a", "b").latency_us == 200
    direct = cluster.model_copy(update={"links": [cluster.links[0].model_copy(update={"latency_us": 50.0}),
                                                  *cluster.links[1:]]})
    assert direct.route("a", "b").buildings == ("a", "b") and direct.route("a", "b").latency_us == 50
    assert cluster.route("a", "b").latency_us == 200


# ----------------------------------------------------------------------------- default placement


def _instance_dict(sizes: list[int], links: list[tuple[str, str, float, float]] | None = None,
                   model: str = "llama3-8b", batch: int = 128) -> dict[str, Any]:
    names = "abcdefgh"
    if links is None:
        links = [(names[i], names[i + 1], 9143, 150.0) for i in range(len(sizes) - 1)]
    return {
        "cluster": {
            "buildings": [{"name": names[i], "gpu": "H100-SXM-80GB", "num_gpus": n}
                          for i, n in enumerate(sizes)],
            "links": [{"a": a, "b": b, "bandwidth_gbps": bw, "latency_us": lat} for a, b, bw, lat in links],
        },
        "job": {"model": load_model(REPO_ROOT / "models" / f"{model}.yaml").model_dump(mode="json"),
                "seq_len": 8192, "global_batch_size": batch},
    }


def _synthetic(sizes: list[int]) -> Instance:
    return Instance.model_validate(_instance_dict(sizes))


DEFAULT_CASES = {
    # name: (instance factory, plan degrees (tp, pp, dp), expected mode, expected stages per building)
    "single-building": (lambda load: load("single-building-llama3-70b"), (8, 4, 64), CrossBuilding.NONE, [4]),
    "two-buildings-dp-across": (lambda load: load("two-buildings-campus-llama3-405b"), (8, 16, 128),
                                CrossBuilding.DP, [16, 16]),
    "only-pp-across-fits": (lambda load: _synthetic([64, 64]), (8, 16, 1), CrossBuilding.PP, [8, 8]),
    "only-pp-across-fits-uneven": (lambda load: _synthetic([96, 32]), (8, 16, 1), CrossBuilding.PP, [12, 4]),
}


@pytest.mark.parametrize("case", sorted(DEFAULT_CASES))
def test_fill_defaults_passes_plan_checks(case: str, load_shipped_instance) -> None:
    make, (tp, pp, dp), mode, stages = DEFAULT_CASES[case]
    instance = make(load_shipped_instance)
    plan = Plan(tp=tp, pp=pp, dp=dp, micro_batch_size=1, schedule="1f1b")
    assert plan.num_gpus == instance.num_gpus
    filled = fill_defaults(instance, plan)
    assert filled.network is not None and filled.placement is not None
    assert filled.placement.cross_building is mode
    assert [s.pp_stages for s in filled.placement.buildings] == stages
    assert sum(filled.placement.layers_per_stage) == instance.job.model_spec.layers
    assert check_placement(filled, instance) == []
    assert check_network(filled) == []
    if schedules_registered("1f1b"):  # the full check also validates the schedule name
        assert check_plan(filled, instance) == []
    assert fill_defaults(instance, filled) == filled  # idempotent


def test_default_placement_explains_when_nothing_fits() -> None:
    instance = _synthetic([24, 104])
    plan = Plan(tp=8, pp=8, dp=2, micro_batch_size=1, schedule="1f1b")
    with pytest.raises(ValueError, match="no default placement fits"):
        default_placement(instance, plan)


@pytest.mark.parametrize(("layers", "pp"), [(32, 1), (32, 3), (126, 16), (80, 7), (61, 8), (5, 5)])
def test_even_layers(layers: int, pp: int) -> None:
    split = even_layers(layers, pp)
    assert len(split) == pp and sum(split) == layers
    assert max(split) - min(split) <= 1
    if 0 < layers % pp <= pp - 2:  # extras go to the middle stages first (ends hold embedding / LM head)
        assert split[0] == split[-1] == min(split)


def test_schedule_names_are_an_enum_in_the_json_schema() -> None:
    from scaleacross_opt.schedules import schedule_names
    from scaleacross_opt.schema_export import json_schema

    assert json_schema("plan")["properties"]["schedule"]["enum"] == schedule_names()
    search = json_schema("instance")["$defs"]["SearchSpace"]["properties"]["schedules"]
    arrays = [option for option in search["anyOf"] if option.get("type") == "array"]
    assert arrays and arrays[0]["items"]["enum"] == schedule_names()
