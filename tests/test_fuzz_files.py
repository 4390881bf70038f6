"""Property-based tests (hypothesis) over mutated instance and plan files (issue 12, item 6).

Shipped instances (``instances/*.yaml``) and a valid plan for the small instance are parsed, mutated
(wrong types, NaN / ±inf, huge and negative numbers, empty strings, unicode garbage, deleted required
keys, unknown keys, duplicate keys, YAML tags, non-mapping top levels, truncated or non-UTF-8 text) and
written to a file that ``scaleacross-opt validate`` checks through click's CliRunner. The exit code is 0
or 1 (never an internal error, never a traceback) and on exit 1 every stderr line reads
``FILE: field: message``.

``test_example_counts`` (last in the file) prints the number of examples run and asserts the target.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from scaleacross_opt.cli import main
from scaleacross_opt.io import load_instance
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.spec import Plan

REPO_ROOT = Path(__file__).resolve().parent.parent
INSTANCES = sorted((REPO_ROOT / "instances").glob("*.yaml"))
SMALL = REPO_ROOT / "instances" / "small-two-buildings-llama3-8b.yaml"
BARE_PLAN = {"tp": 2, "pp": 1, "dp": 64, "micro_batch_size": 2, "schedule": "1f1b"}
FULL_PLAN = fill_defaults(load_instance(SMALL), Plan.model_validate(BARE_PLAN)).model_dump(mode="json")

SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 1
INSTANCE_EXAMPLES = 300 * SCALE
PLAN_EXAMPLES = 250 * SCALE
TARGETS = {"instance": INSTANCE_EXAMPLES, "plan": PLAN_EXAMPLES}
EXAMPLES: Counter[str] = Counter()
EXIT_CODES: Counter[str] = Counter()

_TMP = Path(tempfile.mkdtemp(prefix="fuzz-files-"))
_SOURCES: dict[str, tuple[str, Any]] = {
    path.name: (path.read_text(encoding="utf-8"), yaml.safe_load(path.read_text(encoding="utf-8")))
    for path in INSTANCES
}
_SOURCES["plan-bare.yaml"] = (yaml.safe_dump(BARE_PLAN, sort_keys=False), BARE_PLAN)
_SOURCES["plan-full.yaml"] = (yaml.safe_dump(FULL_PLAN, sort_keys=False), FULL_PLAN)

# ---------------------------------------------------------------------------------------------- mutations

GARBAGE_VALUES = st.one_of(
    st.sampled_from([
        "x", "", " ", "8", "1e3", "nan", "inf", "-inf", "None", "true", True, False, None, [], {}, [1, 2], {"a": 1},
        math.nan, math.inf, -math.inf, 1e300, -1e300, 10**40, -(10**40), 2**63, 2**64 + 1, -1, -1e-9, 0, 0.0,
        -0.0, 5e-324, 1.5, 0.5, 2**24 + 1, "\u202e\u0000\ufeff", "💥" * 50, "a" * 10_000,
    ]),
    st.text(max_size=40),
    st.integers(),
    st.floats(),
    st.lists(st.integers(-5, 5), max_size=3),
)

# Unknown keys, line-breaking characters included (each problem must still print as one line).
UNKNOWN_KEYS = st.one_of(st.sampled_from(["bogus", "Name", "num_gpu", "tp_degree", "", " ", "💥", "a b", "a\nb"]),
                         st.text(max_size=12))

RAW_VALUES = [
    "!!python/object:os.system {}", "!!python/object/apply:os.system ['echo pwned']", "!!python/name:os.system",
    "!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2001-12-14", "2001-12-14", "!!float nan", "!!int 1e3",
    "&anchor 8", "*undefined_alias", "!custom 1", "[", "{", "'unterminated", "|", ">", "~", "0x10", "0o17",
    "1_000", ".inf", "-.inf", ".nan", "1e300", "100000000000000000000000000000000000000000", "-8", '""',
    "[1, [2, [3]]]", "{? [a, b] : 1}", "@", "`", "%", "\t8",
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys / indices) to a node inside ``node``, the root included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def tree_mutation(draw: st.DrawFn, doc: Any) -> tuple[Any, str]:
    """Mutate the parsed document at a random place: replace, delete, add an unknown key, wrap."""
    doc = copy.deepcopy(doc)
    paths = _paths(doc)
    kind = draw(st.sampled_from(["replace", "replace", "delete", "unknown_key", "wrap", "replace_many"]))
    rounds = draw(st.integers(2, 5)) if kind == "replace_many" else 1
    for _ in range(rounds):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            if kind == "delete" or kind == "replace":
                return draw(GARBAGE_VALUES), "json" if draw(st.booleans()) else "yaml"
            continue
        parent = _parent(doc, path)
        if kind in ("replace", "replace_many"):
            parent[path[-1]] = draw(GARBAGE_VALUES)
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "unknown_key":
            target = parent[path[-1]] if isinstance(parent[path[-1]], dict) else parent
            if isinstance(target, dict):
                target[draw(UNKNOWN_KEYS)] = draw(GARBAGE_VALUES)
            else:
                target.append(draw(GARBAGE_VALUES))
        elif kind == "wrap":
            parent[path[-1]] = draw(st.sampled_from([[parent[path[-1]]], {"value": parent[path[-1]]}]))
    return doc, draw(st.sampled_from(["yaml", "yaml", "json"]))


@st.composite
def raw_mutation(draw: st.DrawFn, text: str) -> bytes:
    """Mutate the YAML text: duplicate a line, replace a scalar by a tag, truncate, splice garbage."""
    lines = text.splitlines(keepends=True) or [""]
    kind = draw(st.sampled_from(["duplicate_line", "raw_value", "truncate", "splice", "top_level", "bytes"]))
    if kind == "duplicate_line":
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i + 1, lines[i])
    elif kind == "raw_value":
        candidates = [i for i, line in enumerate(lines) if ": " in line and not line.lstrip().startswith("#")]
        if candidates:
            i = draw(st.sampled_from(candidates))
            head = lines[i].split(": ", 1)[0]
            lines[i] = f"{head}: {draw(st.sampled_from(RAW_VALUES))}\n"
    elif kind == "truncate":
        return text[: draw(st.integers(0, len(text)))].encode()
    elif kind == "splice":
        at = draw(st.integers(0, len(text)))
        return (text[:at] + draw(st.text(max_size=20)) + text[at:]).encode("utf-8", "surrogatepass")
    elif kind == "top_level":
        return draw(st.sampled_from([
            "- a\n- b\n", "42\n", "null\n", "", "'a string'\n", "[1, 2]\n", "!!python/object:os.system {}\n",
            "---\n---\n", "cluster: 1\n---\njob: 2\n", "? [a, b]\n: 1\n", "{1: 2}\n", "~\n", "\ufeff", "\x00",
        ])).encode("utf-8")
    else:
        at = draw(st.integers(0, len(text)))
        data = text.encode()
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return "".join(lines).encode("utf-8")


@st.composite
def mutated_file(draw: st.DrawFn, names: list[str]) -> tuple[str, bytes, str]:
    """(source name, file content, suffix)."""
    name = draw(st.sampled_from(names))
    text, doc = _SOURCES[name]
    if draw(st.integers(0, 2)) == 0:
        return name, draw(raw_mutation(text)), ".yaml"
    mutated, fmt = draw(tree_mutation(doc))
    if fmt == "json":
        return name, json.dumps(mutated, default=str).encode("utf-8"), ".json"
    try:
        content = yaml.safe_dump(mutated, sort_keys=False, allow_unicode=draw(st.booleans()))
    except yaml.YAMLError:
        content = json.dumps(mutated, default=str)
    return name, content.encode("utf-8"), ".yaml"


# ---------------------------------------------------------------------------------------------- properties


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into stdout unless told otherwise
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def _check_validate(content: bytes, suffix: str, extra: list[str]) -> None:
    path = _TMP / f"mutated{suffix}"
    path.write_bytes(content)
    result = _runner().invoke(main, ["validate", str(path), *extra], catch_exceptions=True)
    EXIT_CODES[str(result.exit_code)] += 1
    exception = result.exception if not isinstance(result.exception, SystemExit) else None
    assert exception is None, f"validate raised {exception!r}\nstderr: {result.stderr}"
    assert result.exit_code in (0, 1), f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout
    if result.exit_code == 1:
        lines = result.stderr.splitlines()
        assert lines, "exit 1 without a message on stderr"
        bad = [line for line in lines if not line.startswith(f"{path}: ")]
        assert not bad, f"stderr lines not of the form 'FILE: field: message': {bad}"
    else:
        assert result.stderr == "", result.stderr


INSTANCE_NAMES = [p.name for p in INSTANCES]
PLAN_NAMES = ["plan-bare.yaml", "plan-full.yaml"]


@settings(max_examples=INSTANCE_EXAMPLES)
@given(mutated_file(INSTANCE_NAMES))
def test_validate_mutated_instance(case: tuple[str, bytes, str]) -> None:
    """`validate` on a mutated instance file exits 0 or 1 with one `FILE: field: message` line per problem."""
    _, content, suffix = case
    EXAMPLES["instance"] += 1
    _check_validate(content, suffix, [])


@settings(max_examples=PLAN_EXAMPLES)
@given(mutated_file(PLAN_NAMES), st.booleans())
def test_validate_mutated_plan(case: tuple[str, bytes, str], with_instance: bool) -> None:
    """`validate [--instance SMALL]` on a mutated plan file exits 0 or 1, every problem as `FILE: field: message`."""
    _, content, suffix = case
    EXAMPLES["plan"] += 1
    _check_validate(content, suffix, ["--instance", str(SMALL)] if with_instance else [])


# ------------------------------------------------------------------------------ bugs the fuzzing found (fixed)


def test_unhashable_yaml_key_is_an_input_error() -> None:
    _check_validate(b"cluster:\n  ? [a, b]\n  : 1\njob: {}\n", ".yaml", [])


def test_line_break_in_an_unknown_key_stays_one_line() -> None:
    doc = dict(_SOURCES[SMALL.name][1])
    doc["a\nb"] = "x"
    _check_validate(json.dumps(doc).encode(), ".json", [])


def test_line_break_in_a_building_name_stays_one_line() -> None:
    doc = copy.deepcopy(_SOURCES[SMALL.name][1])
    doc["cluster"]["buildings"][0]["name"] = "\r"
    _check_validate(json.dumps(doc).encode(), ".json", [])


def test_explicit_tag_that_cannot_construct_is_an_input_error() -> None:
    _check_validate(b"tp: !!int 1e3\npp: 1\ndp: 64\nmicro_batch_size: 2\nschedule: 1f1b\n", ".yaml", [])


def test_date_as_model_name_is_an_input_error() -> None:
    _check_validate(b"cluster:\n  buildings: [{name: a, gpu: H100-SXM-80GB, num_gpus: 8}]\n"
                    b"job: {model: 2001-12-14, seq_len: 1024, global_batch_size: 8, precision: bf16}\n",
                    ".yaml", [])


LONG_MODEL = (b"cluster:\n  buildings: [{name: a, gpu: H100-SXM-80GB, num_gpus: 8}]\n"
              b"job: {model: " + b"a" * 300 + b", seq_len: 1024, global_batch_size: 8, precision: bf16}\n")


def test_over_long_model_name_is_an_input_error() -> None:
    _check_validate(LONG_MODEL, ".yaml", [])


# ---------------------------------------------------------------------------------------------- reporting


def test_example_counts() -> None:
    """Print how many examples each property ran; fail if one fell short of its target (runs last)."""
    if not EXAMPLES:
        pytest.skip("run together with the property tests of this file")
    print(f"fuzz_files examples: {dict(EXAMPLES)} (targets {TARGETS}, total {sum(EXAMPLES.values())}); "
          f"validate exit codes: {dict(EXIT_CODES)}")
    ran = {name: EXAMPLES[name] for name in TARGETS}
    assert all(ran[name] >= target for name, target in TARGETS.items() if name in EXAMPLES), (
        f"examples run {ran} below targets {TARGETS}")
