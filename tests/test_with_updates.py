"""Instance.with_updates: dotted-path variants validated like a file (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scaleacross_opt import InputError, load_instance

INSTANCES = Path(__file__).resolve().parent.parent / "instances"
SMALL = INSTANCES / "small-two-buildings-llama3-8b.yaml"
THREE = INSTANCES / "three-buildings-campus-llama3-70b.yaml"


def test_index_and_plain_field_updates_return_a_new_instance() -> None:
    base = load_instance(SMALL)
    variant = base.with_updates({"cluster.links[0].bandwidth_gbps": 1600, "job.global_batch_size": 256})
    assert variant.cluster.links[0].bandwidth_gbps == 1600 and variant.job.global_batch_size == 256
    assert base.cluster.links[0].bandwidth_gbps == 9143 and base.job.global_batch_size == 128  # unchanged
    assert variant.cluster.route("bldg-a", "bldg-b").bandwidth_gbps == 1600  # routes rebuilt, not stale


def test_wildcard_sets_every_element() -> None:
    base = load_instance(THREE)
    variant = base.with_updates({"cluster.links[*].latency_us": 900})
    assert len(variant.cluster.links) >= 2
    assert {link.latency_us for link in variant.cluster.links} == {900}


def test_names_resolve_like_in_a_file() -> None:
    variant = load_instance(SMALL).with_updates({"cluster.buildings[1].gpu": "B200", "job.model": "llama3-70b"})
    assert variant.cluster.buildings[1].gpu.name == "B200" and variant.cluster.buildings[0].gpu.name != "B200"
    assert variant.job.model.name == "llama3-70b"


def test_equal_to_loading_the_edited_file(tmp_path: Path) -> None:
    data = yaml.safe_load(SMALL.read_text())
    data["cluster"]["links"][0]["latency_us"] = 2500
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(data))
    assert load_instance(SMALL).with_updates({"cluster.links[0].latency_us": 2500}) == load_instance(edited)


@pytest.mark.parametrize(("updates", "field", "words"), [
    ({"cluster.links[3].bandwidth_gbps": 1}, "cluster.links[3].bandwidth_gbps", "out of range"),
    ({"cluster.fabric": 1}, "cluster.fabric", "no field 'fabric'"),
    ({"cluster..links": 1}, "cluster..links", "malformed path"),
    ({"[0].a": 1}, "[0].a", "malformed path"),
    ({"job.model.moe.top_k": 2}, "job.model.moe.top_k", "not set"),
    ({"job.seq_len[0]": 2}, "job.seq_len[0]", "not a list"),
    ({"cluster.links[0].bandwidth_gbps": 0}, "cluster.links[0].bandwidth_gbps", "below the minimum"),
    ({"cluster.links[0].bandwidth_gbps": 1e12}, "cluster.links[0].bandwidth_gbps", ""),
    ({"job.seq_len": "8192"}, "job.seq_len", "integer"),
    ({"cluster.buildings[0].gpu": "Z100"}, "cluster.buildings[0].gpu", "unknown GPU"),
    ({"cluster.buildings[1].name": "bldg-a"}, "cluster.buildings", ""),
])
def test_bad_updates_name_the_path_and_reason(updates: dict, field: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        load_instance(SMALL).with_updates(updates, source="variant")
    assert any(issue.file == "variant" and issue.field.startswith(field) and words in issue.message
               for issue in caught.value.issues), caught.value.issues


def test_every_bad_path_is_reported() -> None:
    with pytest.raises(InputError) as caught:
        load_instance(SMALL).with_updates({"cluster.nope": 1, "job.nope": 2})
    assert {issue.field for issue in caught.value.issues} == {"cluster.nope", "job.nope"}
    assert all(str(issue).startswith("<updates>: ") for issue in caught.value.issues)
