"""The design-point suite end to end on its first 3 points with 1 s searches (issue 10): CSV, PNG, and
the headline printed last."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_suite_smoke(tmp_path: Path) -> None:
    command = [sys.executable, str(REPO / "benchmarks" / "suite.py"), "--points", "3", "--time-limit", "1",
               "--out-dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("3 of ") and int(lines[0].split()[2]) >= 40  # the full suite has ≥ 40 points
    headline = lines[-1]
    assert headline.startswith("headline (3 points")
    assert "over production: max" in headline and "over crossdc-sota" in headline
    assert "planner slower than a baseline at" in headline
    with (tmp_path / "suite.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3
    assert all(float(r["production_speedup_vs_production_pct"]) == 0.0 for r in rows)
    assert all(r["planner_step_s"] and float(r["planner_speedup_vs_production_pct"]) >= 0.0 for r in rows)
    assert (tmp_path / "suite.png").read_bytes()[:4] == b"\x89PNG"
