"""The README's pipeline example (section "Pipelines") runs as written (issue 11)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_pipeline_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### Pipelines", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block, "the Pipelines section has a Python block"
    (tmp_path / "instances").symlink_to(ROOT / "instances")  # the block's paths are relative to the repository
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "README.md:Pipelines", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "Gb/s keeps the step within 5 % of ideal links" in out
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2


def test_pipeline_functions_are_exported_with_their_signatures() -> None:
    import inspect

    import scaleacross_opt
    import scaleacross_opt.compare  # importing the submodule must not replace the exported function

    expected = {"compare": "scaleacross_opt.compare", "simulate": "scaleacross_opt.simulator",
                "sweep": "scaleacross_opt.capacity.run", "requirement": "scaleacross_opt.capacity.requirement"}
    for name, module in expected.items():
        function = getattr(scaleacross_opt, name)
        assert inspect.isfunction(function) and function.__module__ == module, name
        assert "instance" in inspect.signature(function).parameters
    assert callable(scaleacross_opt.compare)
