"""Property-based tests (hypothesis) over generated instances (issue 12, item 6).

* ≥ 1,000 generated instances (1–16 buildings, 8 .. 1M GPUs, catalog GPUs, shipped dense and MoE models,
  random connected link graphs with bandwidth / latency / loss over their whole valid range, extremes
  included) go through the loader: it raises nothing but ``InputError``.
* A small subset (≤ 4,096 GPUs) runs the real pipeline: ``solve`` raises only ``InfeasibleError`` /
  ``NoPlanInTimeError``; a returned plan passes ``validate_plan`` and is not faster than its physical floor.
* Another subset estimates and simulates a default-filled hand-written plan: never below the floor.
* Determinism: ``solve --json --seed 0`` twice on the small shipped instance gives identical JSON
  (wall-clock fields removed).

The ``ci`` hypothesis profile (tests/conftest.py) is deterministic; ``HYPOTHESIS_PROFILE=thorough``
runs ten times more examples with fresh randomness. Each property counts the examples it ran in
``EXAMPLES``; ``test_example_counts`` (last in the file) prints the counts and asserts the targets.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scaleacross_opt.catalog.gpus import GPUS
from scaleacross_opt.errors import InfeasibleError, InputError, NoPlanInTimeError
from scaleacross_opt.io import load_instance
from scaleacross_opt.validation.physical_floor import physical_floor
from scaleacross_opt.validation.plan_checks import validate_plan

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_NAMES = sorted(p.stem for p in (REPO_ROOT / "models").glob("*.yaml"))
GPU_NAMES = sorted(GPUS)
SMALL_MODELS = [m for m in ("llama3-8b", "llama3-70b", "mixtral-8x22b") if m in MODEL_NAMES]

SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 1
LOAD_EXAMPLES = 1000 * SCALE
SOLVE_EXAMPLES = 20 * SCALE
REPLAY_EXAMPLES = 20 * SCALE

MAX_TOTAL_GPUS = 1 << 20  # "8 GPUs to 1M GPUs total"
EXAMPLES: Counter[str] = Counter()
TARGETS = {"load": LOAD_EXAMPLES, "solve": SOLVE_EXAMPLES, "replay": REPLAY_EXAMPLES}
OUTCOMES: Counter[str] = Counter()

_TMP = Path(tempfile.mkdtemp(prefix="fuzz-instances-"))

# ---------------------------------------------------------------------------------------------- strategies


def _in_range(lo: float, hi: float, *, exclude_min: bool = False, exclude_max: bool = False,
              extremes: tuple[float, ...] = ()) -> st.SearchStrategy[float]:
    """Floats over [lo, hi] (open ends as asked), log-uniform-ish too, plus the named extremes."""
    plain = st.floats(lo, hi, exclude_min=exclude_min, exclude_max=exclude_max, allow_nan=False)
    positive_lo = max(lo, 5e-324)
    log = st.floats(math.log10(positive_lo) if positive_lo > 0 else -300, math.log10(hi)).map(lambda e: 10.0 ** e)
    log = log.filter(lambda x: (x > lo if exclude_min else x >= lo) and (x < hi if exclude_max else x <= hi))
    return st.one_of(st.sampled_from(extremes), plain, log) if extremes else st.one_of(plain, log)


BANDWIDTH = _in_range(0.0, 1e9, exclude_min=True, extremes=(5e-324, 1e-300, 1e-6, 1.0, 1e9, 400.0, 1.17e6))
LATENCY = _in_range(0.0, 1e8, exclude_min=True, extremes=(5e-324, 1e-300, 1e-3, 1.0, 150.0, 3e4, 1e8))
LOSS = st.one_of(st.sampled_from((0.0, 1e-300, 1e-6, 1e-4, 0.5, 0.999999, 1 - 2**-53)),
                 st.floats(0.0, 1.0, exclude_max=True))
# The pipeline subsets draw values the loader accepts (≥ 1 ns, ≥ 1 Mb/s: subnormal ones once crashed solve, see
# test_subnormal_rates_and_latencies_are_input_errors); the loader property covers the whole range.
LATENCY_PIPELINE = LATENCY.filter(lambda x: x >= 1e-3)
BANDWIDTH_PIPELINE = BANDWIDTH.filter(lambda x: x >= 1e-3)
OVERSUB = _in_range(1.0, 1024.0, extremes=(1.0, 2.8, 16.0, 1024.0))


def _node_sizes(gpu: str) -> list[int]:
    """gpus_per_node values that nest with the GPU's NVLink domain (divisors and a few multiples)."""
    domain = GPUS[gpu].nvlink_domain_size
    sizes = {d for d in range(1, domain + 1) if domain % d == 0} | {domain * 2, domain * 4}
    return sorted(s for s in sizes if s <= 1024)


@st.composite
def buildings(draw: st.DrawFn, count: int, max_total: int, latency: st.SearchStrategy[float] = LATENCY,
              pow2: bool = False) -> list[dict[str, Any]]:
    """``count`` buildings with at most ``max_total`` GPUs in all (≥ 8 when max_total allows); with ``pow2``,
    power-of-two node counts half of the time (degrees then divide more often, so solve finds plans)."""
    out: list[dict[str, Any]] = []
    budget = max_total
    for i in range(count):
        left = count - i - 1  # buildings still to come: keep ≥ 1 GPU for each
        room = max(1, budget - left)
        gpu = draw(st.sampled_from(GPU_NAMES))
        per_node = draw(st.sampled_from([s for s in _node_sizes(gpu) if s <= room] or [1]))
        max_nodes = max(1, room // per_node)
        min_nodes = min(max(1, math.ceil(8 / per_node)) if i == 0 else 1, max_nodes)
        options = [st.integers(min_nodes, min(max_nodes, min_nodes + 16)), st.integers(min_nodes, max_nodes),
                   st.just(max_nodes)]
        if pow2 and draw(st.booleans()):
            options = [st.sampled_from([1 << k for k in range(max_nodes.bit_length()) if 1 << k >= min_nodes]
                                       or [max_nodes])]
        nodes = draw(st.one_of(options))
        num_gpus = nodes * per_node
        budget -= num_gpus
        building: dict[str, Any] = {"name": f"b{i}", "gpu": gpu, "num_gpus": num_gpus}
        if per_node != 8 or draw(st.booleans()):
            building["gpus_per_node"] = per_node
        if draw(st.booleans()):
            building["fabric_oversubscription"] = draw(OVERSUB)
        if draw(st.integers(0, 3)) == 0:
            building["fabric_latency_us"] = draw(latency)
        out.append(building)
    return out


@st.composite
def links(draw: st.DrawFn, names: list[str], latency: st.SearchStrategy[float] = LATENCY,
          bandwidth: st.SearchStrategy[float] = BANDWIDTH) -> list[dict[str, Any]]:
    """A random spanning tree plus random extra edges: always connected, at most one link per pair."""
    pairs: list[tuple[str, str]] = []
    order = draw(st.permutations(names))
    for i in range(1, len(order)):
        parent = order[draw(st.integers(0, i - 1))]
        pairs.append((parent, order[i]))
    all_pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    have = {frozenset(p) for p in pairs}
    spare = [p for p in all_pairs if frozenset(p) not in have]
    if spare:
        pairs += draw(st.lists(st.sampled_from(spare), max_size=min(len(spare), 8), unique=True))
    out = []
    for a, b in pairs:
        if draw(st.booleans()):
            a, b = b, a
        link: dict[str, Any] = {"a": a, "b": b, "bandwidth_gbps": draw(bandwidth), "latency_us": draw(latency)}
        if draw(st.booleans()):
            link["loss_rate"] = draw(LOSS)
        out.append(link)
    return out


@st.composite
def instance_dicts(draw: st.DrawFn, *, max_buildings: int = 16, max_total: int = MAX_TOTAL_GPUS,
                   models: list[str] | None = None, respect_work_bounds: bool = False) -> dict[str, Any]:
    count = draw(st.integers(1, max_buildings))
    latency = LATENCY if not respect_work_bounds else LATENCY_PIPELINE
    bs = draw(buildings(count, max_total, latency, pow2=respect_work_bounds))
    total = sum(b["num_gpus"] for b in bs)
    job_gpus = None
    if draw(st.integers(0, 3)) == 0:
        job_gpus = draw(st.integers(1, total) if not respect_work_bounds else
                        st.sampled_from([g for g in (8, 16, 32, 64, 128, 256) if g <= total] or [total]))
    gpus = job_gpus or total
    if respect_work_bounds:
        batch = draw(st.one_of(st.integers(1, min(1 << 24, 4 * gpus)),
                               st.sampled_from([1 << k for k in range((4 * gpus).bit_length())])))
        seq_len = draw(st.sampled_from([1, 128, 2048, 4096, 8192]))
    else:
        batch = draw(st.one_of(st.integers(1, 1 << 24), st.sampled_from([1, 1 << 24, gpus, 4096 * gpus])))
        seq_len = draw(st.one_of(st.integers(1, 1 << 20), st.sampled_from([1, 8192, 1 << 20])))
    job: dict[str, Any] = {
        "model": draw(st.sampled_from(models or MODEL_NAMES)),
        "seq_len": seq_len,
        "global_batch_size": batch,
        "precision": draw(st.sampled_from(["bf16", "fp8"])),
    }
    if job_gpus is not None:
        job["num_gpus"] = job_gpus
    bandwidth = BANDWIDTH if not respect_work_bounds else BANDWIDTH_PIPELINE
    link_list = draw(links([b["name"] for b in bs], latency, bandwidth)) if count > 1 else []
    data: dict[str, Any] = {
        "name": "fuzz",
        "cluster": {"buildings": bs, "links": link_list},
        "job": job,
    }
    if draw(st.integers(0, 2)) == 0:
        data["search"] = draw(search_dicts())
    return data


@st.composite
def search_dicts(draw: st.DrawFn) -> dict[str, Any]:
    choices: dict[str, st.SearchStrategy[Any]] = {
        "tp_degrees": st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True),
        "pp_degrees": st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=1, max_size=3, unique=True),
        "micro_batch_sizes": st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=2, unique=True),
        "schedules": st.lists(st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b"]), min_size=1, max_size=3,
                              unique=True),
        "recompute": st.lists(st.sampled_from(["none", "selective", "full"]), min_size=1, max_size=3, unique=True),
        "zero_stages": st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True),
        "cross_building": st.lists(st.sampled_from(["none", "pp", "dp", "pp+dp"]), min_size=1, max_size=4,
                                   unique=True),
        "qps_per_connection": st.lists(st.sampled_from([1, 4, 16, 256]), min_size=1, max_size=2, unique=True),
        "window_kib_per_qp": st.lists(st.sampled_from([1, 4096, 1 << 20]), min_size=1, max_size=2, unique=True),
    }
    keys = draw(st.lists(st.sampled_from(sorted(choices)), max_size=4, unique=True))
    return {k: draw(choices[k]) for k in keys}


def _write(data: dict[str, Any], name: str = "instance.json") -> Path:
    """The instance as a file for ``load_instance`` (JSON: PyYAML's pure-Python parser would dominate the run
    time; the models it names are still read from the shipped YAML files)."""
    path = _TMP / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _load_or_none(data: dict[str, Any]):
    """The loaded instance, or None when the loader rejects it with InputError (the only allowed error)."""
    try:
        instance = load_instance(_write(data))
    except InputError as err:
        assert err.issues, "InputError without issues"
        OUTCOMES["input_error"] += 1
        return None
    OUTCOMES["loaded"] += 1
    return instance


# ---------------------------------------------------------------------------------------------- properties


@settings(max_examples=LOAD_EXAMPLES)
@given(instance_dicts())
def test_loader_raises_only_input_error(data: dict[str, Any]) -> None:
    """Any generated instance either loads or is rejected with InputError (never another exception)."""
    _load_or_none(data)
    EXAMPLES["load"] += 1


@settings(max_examples=SOLVE_EXAMPLES)
@given(instance_dicts(max_buildings=4, max_total=4096, models=SMALL_MODELS, respect_work_bounds=True))
def test_solve_small_instances(data: dict[str, Any]) -> None:
    """solve raises only InfeasibleError / NoPlanInTimeError; a returned plan is valid and above its floor."""
    from scaleacross_opt.optimizer import solve

    assert 8 <= sum(b["num_gpus"] for b in data["cluster"]["buildings"]) <= 4096

    instance = _load_or_none(data)
    assume(instance is not None)
    EXAMPLES["solve"] += 1
    try:
        result = solve(instance, time_limit_s=2)
    except (InfeasibleError, NoPlanInTimeError):
        OUTCOMES["solve_no_plan"] += 1
        return
    OUTCOMES["solve_plan"] += 1
    assert validate_plan(result.plan, instance) == []
    floor = physical_floor(instance, result.plan)
    assert result.step_time_s >= floor.seconds * (1 - 1e-9), (result.step_time_s, floor)


@st.composite
def instance_and_plan(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A small instance and a bare plan whose degrees multiply to the job's GPUs and divide the batch."""
    data = draw(instance_dicts(max_buildings=4, max_total=4096, models=SMALL_MODELS, respect_work_bounds=True))
    data["job"].pop("num_gpus", None)
    gpus = sum(b["num_gpus"] for b in data["cluster"]["buildings"])
    per_node = min(b.get("gpus_per_node", 8) for b in data["cluster"]["buildings"])
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if per_node % d == 0 and gpus % d == 0]))
    pp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if (gpus // tp) % d == 0]))
    dp = gpus // (tp * pp)
    mbs = draw(st.sampled_from([1, 2]))
    data["job"]["global_batch_size"] = dp * mbs * draw(st.integers(1, 4))
    data["job"]["seq_len"] = draw(st.sampled_from([128, 1024, 4096]))
    data.pop("search", None)
    plan = {"tp": tp, "pp": pp, "dp": dp, "micro_batch_size": mbs,
            "schedule": draw(st.sampled_from(["gpipe", "1f1b"]))}
    return data, plan


@settings(max_examples=REPLAY_EXAMPLES)
@given(instance_and_plan())
def test_estimate_and_simulate_default_plan_above_floor(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """estimate and simulate of a default-filled plan never beat the plan's physical floor."""
    from scaleacross_opt.cost.step import estimate
    from scaleacross_opt.plan_defaults import fill_defaults
    from scaleacross_opt.simulator import simulate
    from scaleacross_opt.spec import Plan
    from scaleacross_opt.validation.plan_checks import check_plan

    data, bare = case
    instance = _load_or_none(data)
    assume(instance is not None)
    plan = Plan.model_validate(bare)
    assume(not check_plan(plan, instance))
    try:
        plan = fill_defaults(instance, plan)
    except ValueError:
        assume(False)
    assume(not check_plan(plan, instance))
    EXAMPLES["replay"] += 1
    floor = physical_floor(instance, plan).seconds
    est = estimate(instance, plan).step_time_s
    sim = simulate(instance, plan).step_time_s
    assert est >= floor * (1 - 1e-9), (est, floor, plan)
    assert sim >= floor * (1 - 1e-9), (sim, floor, plan)


# ---------------------------------------------------------------------------------------------- bugs found


@pytest.mark.parametrize(("building", "link"), [
    ({"fabric_latency_us": 5e-324}, {}),  # once crashed solve: rtt·1e-6 underflowed to 0 (found by this suite)
    ({}, {"bandwidth_gbps": 5e-324}),  # once crashed solve: the path's goodput underflowed to 0
    ({}, {"latency_us": 5e-324}),
])
def test_subnormal_rates_and_latencies_are_input_errors(building: dict, link: dict) -> None:
    data = {"cluster": {"buildings": [{"name": n, "gpu": "H100-SXM-80GB", "num_gpus": 8, **building}
                                      for n in ("b0", "b1")],
                        "links": [{"a": "b0", "b": "b1", "bandwidth_gbps": 100.0, "latency_us": 150, **link}]},
            "job": {"model": "llama3-8b", "seq_len": 1024, "global_batch_size": 16, "precision": "bf16"}}
    with pytest.raises(InputError, match=r"below the minimum"):
        load_instance(_write(data, "subnormal.json"))


# ---------------------------------------------------------------------------------------------- determinism


def _without_wall(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_wall(v) for k, v in value.items() if not str(k).endswith("wall_s")}
    if isinstance(value, list):
        return [_without_wall(v) for v in value]
    return value


@pytest.fixture(scope="module")
def small_solved_twice(small_path: Path) -> list[dict[str, Any]]:
    from click.testing import CliRunner

    from scaleacross_opt.cli import main

    def run(args: list[Any]):
        try:
            runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
        except TypeError:
            runner = CliRunner()
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=True)
        result.exception_ = result.exception if not isinstance(result.exception, SystemExit) else None
        return result

    outputs = []
    for _ in range(2):
        result = run(["solve", small_path, "--json", "--time-limit", "10", "--seed", "0", "--quiet"])
        assert result.exit_code == 0, (result.stderr, result.exception_)
        outputs.append(_without_wall(json.loads(result.stdout)))
    return outputs


@pytest.fixture(scope="module")
def small_path() -> Path:
    return REPO_ROOT / "instances" / "small-two-buildings-llama3-8b.yaml"


def test_solve_json_is_byte_identical(small_solved_twice: list[dict[str, Any]]) -> None:
    """Same instance, same seed, a search that converges: the answer — plan, step time, estimate, bound,
    breakdown, memory, solver status, proven lower bound and gap — is byte-identical. (The search trace is
    not compared: once a search takes more than one round, which plans the CP-SAT portfolio offers before it
    proves a round optimal and how far a time-boxed polish gets depend on thread timing.)"""
    trace = {"history", "rounds", "candidates_simulated", "simulations_reused", "candidates_rejected", "screened",
             "bound_ratio_min"}
    first, second = (json.dumps({**out, "solver": {k: v for k, v in out["solver"].items() if k not in trace}},
                                sort_keys=True, indent=1) for out in small_solved_twice)
    assert small_solved_twice[0]["solver"]["status"] == "optimal"
    assert first == second


# ---------------------------------------------------------------------------------------------- reporting


def test_example_counts() -> None:
    """Print how many examples each property ran; fail if one fell short of its target (runs last)."""
    if not EXAMPLES:
        pytest.skip("run together with the property tests of this file")
    print(f"fuzz_instances examples: {dict(EXAMPLES)} (targets {TARGETS}); outcomes: {dict(OUTCOMES)}")
    ran = {name: EXAMPLES[name] for name in TARGETS}
    assert all(ran[name] >= target for name, target in TARGETS.items() if name in EXAMPLES), (
        f"examples run {ran} below targets {TARGETS}")
