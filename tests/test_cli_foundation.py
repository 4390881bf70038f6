"""The CLI skeleton: version, schema export, validate on the shipped instances, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from scaleacross_opt import __version__, cli
from scaleacross_opt.errors import InfeasibleError
from scaleacross_opt.schedules import schedule_names


def test_version(run_cli) -> None:
    result = run_cli(["--version"])
    assert result.exit_code == 0
    assert __version__ in result.stdout
    assert "scaleacross-opt" in result.stdout


def test_help_lists_every_command(run_cli) -> None:
    result = run_cli(["--help"])
    assert result.exit_code == 0
    for command in ("validate", "schema", "estimate", "simulate", "solve", "compare"):
        assert command in result.stdout


def test_the_package_runs_as_a_module() -> None:
    """``python -m scaleacross_opt`` is the same command (``python -m scaleacross_opt.cli`` used to die on a
    circular import)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "scaleacross_opt", "--help"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: scaleacross-opt") and "solve" in result.stdout


@pytest.mark.parametrize("command", ["solve", "compare"])
def test_threads_help_states_the_real_default(command: str, run_cli) -> None:
    from scaleacross_opt.optimizer.refine import DEFAULT_THREADS

    result = run_cli([command, "--help"])
    assert result.exit_code == 0
    assert f"(default {DEFAULT_THREADS}" in " ".join(result.stdout.split())


@pytest.mark.parametrize("kind", ["instance", "plan", "model"])
def test_schema_prints_json(kind: str, run_cli) -> None:
    result = run_cli(["schema", kind])
    assert result.exit_code == 0, result.stderr
    schema = json.loads(result.stdout)
    assert "$schema" in schema
    assert schema["properties"]
    assert result.stderr == ""


def _loadable_now(path: Path) -> bool:
    """False for an instance whose search restricts schedules that are not registered yet."""
    schedules = (yaml.safe_load(path.read_text(encoding="utf-8")).get("search") or {}).get("schedules") or []
    return set(schedules) <= set(schedule_names())


def test_validate_shipped_instances(run_cli, instances_dir: Path) -> None:
    paths = [p for p in sorted(instances_dir.glob("*.yaml")) if _loadable_now(p)]
    assert len(paths) >= 9
    result = run_cli(["validate", *paths])
    assert result.exit_code == 0, result.stderr
    for path in paths:
        assert f"{path}: ok (instance)" in result.stdout


def test_validate_all_shipped_instances(run_cli, instances_dir: Path) -> None:
    paths = sorted(instances_dir.glob("*.yaml"))
    if not all(_loadable_now(p) for p in paths):
        pytest.skip("an instance restricts schedules that are not registered yet")
    result = run_cli(["validate", *paths])
    assert result.exit_code == 0, result.stderr


def test_validate_shipped_models(run_cli, models_dir: Path) -> None:
    paths = sorted(models_dir.glob("*.yaml"))
    result = run_cli(["validate", *paths])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("ok (model)") == len(paths)


def test_exit_codes_are_documented() -> None:
    codes = (cli.EXIT_OK, cli.EXIT_INVALID, cli.EXIT_USAGE, cli.EXIT_INFEASIBLE, cli.EXIT_INTERNAL)
    assert codes == (0, 1, 2, 3, 4)
    doc = re.sub(r"\s+", " ", cli.__doc__ or "")
    assert "0 ok, 1 invalid input, 2 usage, 3 infeasible, 4 internal error" in doc


@pytest.mark.parametrize("args", [["no-such-command"], ["schema", "bogus"], ["validate"],
                                  ["solve", "x.yaml", "--time-limit", "0"]])
def test_usage_errors_exit_2(args: list[str], run_cli) -> None:
    result = run_cli(args)
    assert result.exit_code == 2
    assert "Traceback" not in result.stdout + result.stderr


def test_internal_error_exits_4_without_traceback(run_cli, instances_dir: Path, monkeypatch) -> None:
    def broken(path: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("scaleacross_opt.io.load_instance", broken)
    result = run_cli(["validate", instances_dir / "single-building-llama3-70b.yaml"])
    assert result.exit_code == 4
    assert "internal error: RuntimeError: boom" in result.stderr
    assert "--debug" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    debug = run_cli(["--debug", "validate", instances_dir / "single-building-llama3-70b.yaml"])
    assert isinstance(debug.exception, RuntimeError)


def test_infeasible_exits_3(run_cli, instances_dir: Path, monkeypatch) -> None:
    def infeasible(path: object) -> None:
        raise InfeasibleError("memory: needs 754 GiB per GPU, capacity 40 GiB")

    monkeypatch.setattr("scaleacross_opt.io.load_instance", infeasible)
    result = run_cli(["validate", instances_dir / "infeasible-memory-llama3-405b-a100.yaml"])
    assert result.exit_code == 3
    assert result.stderr.startswith("infeasible: memory")


def _readme_yaml_blocks(repo_root: Path) -> list[str]:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)


def test_readme_examples_validate(run_cli, repo_root: Path, tmp_path: Path) -> None:
    blocks = _readme_yaml_blocks(repo_root)
    assert len(blocks) >= 2, "README shows an annotated instance and an annotated plan"
    instance_path, plan_path = tmp_path / "instance.yaml", tmp_path / "plan.yaml"
    instance_path.write_text(blocks[0], encoding="utf-8")
    plan_path.write_text(blocks[1], encoding="utf-8")
    if not _loadable_now(instance_path):
        pytest.skip("the README instance restricts schedules that are not registered yet")
    result = run_cli(["validate", "--instance", instance_path, instance_path, plan_path])
    assert result.exit_code == 0, result.stderr
