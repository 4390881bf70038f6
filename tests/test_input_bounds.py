"""Every numeric input field has a documented range (issue 12): a value on the bound loads, one just
beyond it gives exit 1 and a `FILE: field: message` line naming the field, the value and the bound."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from scaleacross_opt.errors import InputError
from scaleacross_opt.io import load_plan
from scaleacross_opt.schema_export import json_schema
from scaleacross_opt.spec import bounds

BASE: dict[str, Any] = {  # 2 × 512 H100, Llama 3 8B, 64 sequences of 4,096 tokens
    "cluster": {
        "buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 512},
                      {"name": "b", "gpu": "H100-SXM-80GB", "num_gpus": 512}],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 9143, "latency_us": 150}],
    },
    "job": {"model": "llama3-8b", "seq_len": 4096, "global_batch_size": 64},
}

TINY_MODEL = {"name": "tiny", "layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_heads": 4,
              "num_kv_heads": 4, "vocab_size": 1000}
TINY_GPU = {"name": "toy", "peak_bf16_tflops": 100, "peak_fp8_tflops": 200, "hbm_gib": 80,
            "hbm_bandwidth_gb_per_s": 3000, "nvlink_bandwidth_gb_per_s": 450, "nvlink_domain_size": 8,
            "nic_bandwidth_gbps": 400}


def setter(path: str, value: Any):
    """Return an edit that sets the dotted ``path`` (list indices as numbers) of an instance dict."""
    def edit(data: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node: Any = data
        for part in parents:
            node = node[part]
        node[last] = value
    return edit


def with_inline_gpu(data: dict[str, Any]) -> None:
    for building in data["cluster"]["buildings"]:
        building["gpu"] = dict(TINY_GPU)


def with_inline_model(data: dict[str, Any]) -> None:
    data["job"]["model"] = copy.deepcopy(TINY_MODEL)


def with_1024_gpus(data: dict[str, Any]) -> None:
    for building in data["cluster"]["buildings"]:
        building["num_gpus"] = 1024


def with_moe(data: dict[str, Any]) -> None:
    with_inline_model(data)
    data["job"]["model"]["moe"] = {"num_experts": 2048, "top_k": 2, "expert_ffn_hidden_size": 512}


# (field path reported, dotted path in the instance dict, value on the bound, value just beyond, prepare)
CASES = [
    ("job.seq_len", "job.seq_len", 1 << 20, (1 << 20) + 1, None),
    ("cluster.buildings[0].gpus_per_node", "cluster.buildings.0.gpus_per_node", 1024, 1025, with_1024_gpus),
    ("cluster.buildings[0].fabric_oversubscription", "cluster.buildings.0.fabric_oversubscription",
     1024.0, 1024.5, None),
    ("cluster.buildings[0].fabric_latency_us", "cluster.buildings.0.fabric_latency_us", 1e8, 1.0000001e8, None),
    ("cluster.links[0].bandwidth_gbps", "cluster.links.0.bandwidth_gbps", 1e9, 1.000001e9, None),
    ("cluster.links[0].latency_us", "cluster.links.0.latency_us", 1e8, 1.0000001e8, None),
    ("cluster.buildings[0].gpu.hbm_gib", "cluster.buildings.0.gpu.hbm_gib", 2.0**20, 2.0**20 + 1, with_inline_gpu),
    ("cluster.buildings[0].gpu.nvlink_domain_size", "cluster.buildings.0.gpu.nvlink_domain_size",
     1 << 16, (1 << 16) + 1, with_inline_gpu),
    ("job.model.layers", "job.model.layers", 1024, 1025, with_inline_model),
    ("job.model.vocab_size", "job.model.vocab_size", 1 << 24, (1 << 24) + 1, with_inline_model),
    ("job.model.moe.top_k", "job.model.moe.top_k", 1024, 1025, with_moe),
    ("search.virtual_stages[0]", "search.virtual_stages", [1024], [1025], None),
    ("search.window_kib_per_qp[0]", "search.window_kib_per_qp", [1 << 20], [(1 << 20) + 1], None),
    ("search.tp_degrees[1]", "search.tp_degrees", [8, 1 << 24], [8, (1 << 24) + 1], None),
]


def write(tmp_path: Path, data: dict[str, Any], name: str = "instance.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def instance_with(path: str, value: Any, prepare: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    if path.startswith("search."):
        data["search"] = {}
    if prepare is not None:
        prepare(data)
    setter(path, value)(data)
    return data


def error_lines(stderr: str, file: Path) -> dict[str, str]:
    """``{field: message}`` of the `FILE: field: message` lines."""
    out = {}
    for line in stderr.splitlines():
        assert line.startswith(f"{file}: "), line
        field, _, message = line[len(f"{file}: "):].partition(": ")
        out[field] = message
    return out


@pytest.mark.parametrize(("field", "path", "inside", "outside", "prepare"), CASES, ids=[c[0] for c in CASES])
def test_bound_inside_passes_outside_fails(field, path, inside, outside, prepare, run_cli, tmp_path: Path) -> None:
    good = write(tmp_path, instance_with(path, inside, prepare), "good.yaml")
    result = run_cli(["validate", good])
    assert result.exit_code == 0, result.stderr
    bad = write(tmp_path, instance_with(path, outside, prepare), "bad.yaml")
    result = run_cli(["validate", bad])
    assert result.exception is None and "Traceback" not in result.stderr
    assert result.exit_code == 1
    lines = error_lines(result.stderr, bad)
    assert field in lines, lines
    shown = outside[-1] if isinstance(outside, list) else outside
    assert lines[field].startswith(f"{shown:.15g} exceeds the maximum ")


def test_upper_bound_message_says_why(run_cli, tmp_path: Path) -> None:
    bad = write(tmp_path, instance_with("job.seq_len", 99999999999999999999999999999999, None))
    result = run_cli(["validate", bad])
    assert result.exit_code == 1
    message = error_lines(result.stderr, bad)["job.seq_len"]
    assert message == ("99999999999999999999999999999999 exceeds the maximum 1048576 "
                       f"({bounds.WHY['seq_len']})")


def test_lower_bound_message_names_the_value(run_cli, tmp_path: Path) -> None:
    bad = write(tmp_path, instance_with("cluster.links.0.latency_us", 0, None))
    message = error_lines(run_cli(["validate", bad]).stderr, bad)["cluster.links[0].latency_us"]
    assert message == "0 is below the minimum 0.001"  # not "Input should be greater than or equal to 0.001"


def test_huge_batch_on_16_gpus_is_rejected(run_cli, tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["cluster"] = {"buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 16}]}
    data["job"]["global_batch_size"] = 100_000_000
    bad = write(tmp_path, data)
    result = run_cli(["validate", bad])
    assert result.exit_code == 1
    assert "100000000 exceeds the maximum 16777216" in error_lines(result.stderr, bad)["job.global_batch_size"]


def test_sequences_per_gpu_cross_field_bound(run_cli, tmp_path: Path) -> None:
    """A batch within its own range can still be too large for the job's GPUs: 4,096 sequences per GPU."""
    data = copy.deepcopy(BASE)
    data["cluster"] = {"buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 16}]}
    data["job"].update(seq_len=128, global_batch_size=bounds.MAX_SEQUENCES_PER_GPU * 16)
    assert run_cli(["validate", write(tmp_path, data, "good.yaml")]).exit_code == 0
    data["job"]["global_batch_size"] += 1
    bad = write(tmp_path, data, "bad.yaml")
    result = run_cli(["validate", bad])
    assert result.exit_code == 1
    message = error_lines(result.stderr, bad)["job.global_batch_size"]
    assert "global_batch_size=65537 on 16 GPUs" in message and "sequences per GPU" in message


def test_job_num_gpus_counts_for_the_cross_field_bound(run_cli, tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["job"].update(seq_len=128, num_gpus=16, global_batch_size=bounds.MAX_SEQUENCES_PER_GPU * 16 + 1)
    bad = write(tmp_path, data)
    assert "on 16 GPUs" in error_lines(run_cli(["validate", bad]).stderr, bad)["job.global_batch_size"]


def test_tokens_per_gpu_cross_field_bound(run_cli, tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["cluster"] = {"buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 16}]}
    data["job"].update(seq_len=1 << 20, global_batch_size=2048)  # 2^31 tokens = 2^27 per GPU
    assert run_cli(["validate", write(tmp_path, data, "good.yaml")]).exit_code == 0
    data["job"]["global_batch_size"] = 2049
    bad = write(tmp_path, data, "bad.yaml")
    result = run_cli(["validate", bad])
    assert result.exit_code == 1
    lines = error_lines(result.stderr, bad)
    assert list(lines) == ["job.seq_len"]
    assert "global_batch_size=2049 × seq_len=1048576" in lines["job.seq_len"]
    assert "tokens per GPU per step" in lines["job.seq_len"]


def test_global_batch_size_schema_bound(run_cli, tmp_path: Path) -> None:
    """2^24 sequences load on 4,096 GPUs (4,096 per GPU, 2^24 tokens per GPU); one more does not."""
    data = copy.deepcopy(BASE)
    data["cluster"] = {"buildings": [{"name": "a", "gpu": "H100-SXM-80GB", "num_gpus": 4096}]}
    data["job"].update(seq_len=1024, global_batch_size=1 << 24)
    assert run_cli(["validate", write(tmp_path, data, "good.yaml")]).exit_code == 0
    data["job"]["global_batch_size"] += 1
    bad = write(tmp_path, data, "bad.yaml")
    lines = error_lines(run_cli(["validate", bad]).stderr, bad)
    assert lines["job.global_batch_size"].startswith("16777217 exceeds the maximum 16777216")


PLAN = {"tp": 8, "pp": 2, "dp": 64, "micro_batch_size": 1, "schedule": "1f1b"}


@pytest.mark.parametrize(("field", "value"), [
    ("tp", (1 << 24) + 1), ("dp", (1 << 24) + 1), ("micro_batch_size", (1 << 24) + 1), ("virtual_stages", 1025),
])
def test_plan_bounds(field: str, value: int, tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**PLAN, field: value}), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_plan(path)
    assert [issue.field for issue in caught.value.issues] == [field]
    assert f"{value} exceeds the maximum" in caught.value.issues[0].message


def test_plan_layers_per_stage_entries_are_bounded(tmp_path: Path) -> None:
    placement = {"cross_building": "none", "buildings": [{"building": "a", "dp_replicas": 64, "pp_stages": 2}],
                 "layers_per_stage": [16, 1025]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({**PLAN, "placement": placement}), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_plan(path)
    assert [issue.field for issue in caught.value.issues] == ["placement.layers_per_stage[1]"]


def test_schema_exports_seq_len_maximum(run_cli) -> None:
    result = run_cli(["schema", "instance"])
    assert result.exit_code == 0
    schema = yaml.safe_load(result.stdout)  # JSON is YAML
    assert schema["$defs"]["Job"]["properties"]["seq_len"]["maximum"] == 1 << 20


def numeric_leaves(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every sub-schema of type integer or number, with a readable location."""
    out = []
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            out.append((where, node))
        for key, value in node.items():
            out += numeric_leaves(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += numeric_leaves(value, f"{where}[{i}]")
    return out


@pytest.mark.parametrize("kind", ["instance", "plan", "model"])
def test_every_numeric_field_has_both_bounds_in_the_schema(kind: str) -> None:
    leaves = numeric_leaves(json_schema(kind))
    assert leaves
    unbounded = [where for where, leaf in leaves
                 if not ({"maximum", "exclusiveMaximum"} & set(leaf) and {"minimum", "exclusiveMinimum"} & set(leaf))]
    assert not unbounded, f"numeric fields without a lower and an upper bound: {unbounded}"
