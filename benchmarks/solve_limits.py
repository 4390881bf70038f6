"""Does ``solve`` keep its time limit and stay small in memory on the hardest inputs?

Each case runs ``scaleacross-opt solve --json --quiet`` in a child process (so its peak RSS is its own)
and records wall time (overrun = wall − limit, the goal: ≤ 10 % or 2 s, whichever is larger) and peak
resident memory (goal ≤ 4 GB). Cases: the largest shipped instance (102,400 GPUs, 5 buildings), the
MoE instance (the largest CP-SAT model), and instances at the documented input bounds built in a temp
folder: 2^24 GPUs in 16 buildings, the longest sequence (2^20 tokens) and the largest batch the
cross-field rule admits. Usage: ``python benchmarks/solve_limits.py [--time-limit S]``; the last line
is the headline (the worst overrun and the largest peak RSS).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "instances"


def bound_cases(folder: Path) -> list[tuple[str, Path]]:
    """Instances at the input bounds, written to ``folder`` (models by name, resolved from the package)."""
    base = yaml.safe_load((SHIPPED / "two-buildings-campus-llama3-405b.yaml").read_text(encoding="utf-8"))
    cases = []
    huge = {**base, "name": "bounds-16m-gpus"}
    huge["cluster"] = {
        "buildings": [{"name": f"b{i}", "gpu": "H100-SXM-80GB", "num_gpus": 1 << 20} for i in range(16)],
        "links": [{"a": f"b{i}", "b": f"b{(i + 1) % 16}", "bandwidth_gbps": 1e6, "latency_us": 200.0}
                  for i in range(16)],
    }
    huge["job"] = {**base["job"], "num_gpus": 1 << 24, "global_batch_size": 1 << 20}
    cases.append(huge)
    long = {**base, "name": "bounds-longest-sequence"}
    long["job"] = {**base["job"], "seq_len": 1 << 20, "global_batch_size": 128}
    cases.append(long)
    wide = {**base, "name": "bounds-largest-batch"}
    gpus = sum(b["num_gpus"] for b in base["cluster"]["buildings"])
    wide["job"] = {**base["job"], "seq_len": 4096, "global_batch_size": min(1 << 24, 4096 * gpus // 128)}
    cases.append(wide)
    out = []
    for data in cases:
        path = folder / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        out.append((data["name"], path))
    return out


def run(path: Path, time_limit_s: float) -> tuple[float, float, int, str]:
    """(wall s, peak RSS GB of the child, exit code, status or last stderr line) of one solve."""
    command = [sys.executable, "-c", "from scaleacross_opt.cli import main; main()", "solve", str(path), "--json",
               "--quiet", "--time-limit", str(time_limit_s)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status_word, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status_word)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    try:
        payload = json.loads(stdout)
        status = payload.get("status") or payload["solver"]["status"]
    except (json.JSONDecodeError, KeyError):
        status = (stderr.strip().splitlines() or ["?"])[-1][:80]
    return wall, usage.ru_maxrss / 1e6, child.returncode, status


def main() -> None:
    """Run every case; print one row each and the headline last."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    limit = args.time_limit
    worst_over, worst_rss = 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        shipped = ("five-buildings-llama4-fabric-llama3-405b", "moe-deepseek-v3-h800")
        cases = [(name, SHIPPED / f"{name}.yaml") for name in shipped] + bound_cases(Path(tmp))
        print(f"{'case':<42} {'limit s':>7} {'wall s':>7} {'over s':>7} {'peak GB':>8} exit  status")
        for name, path in cases:
            wall, rss, code, status = run(path, limit)
            over = wall - limit
            worst_over, worst_rss = max(worst_over, over), max(worst_rss, rss)
            print(f"{name:<42} {limit:7.1f} {wall:7.1f} {over:+7.1f} {rss:8.2f} {code:4d}  {status}")
    allowed = max(0.1 * limit, 2.0)
    print(f"worst overrun {worst_over:+.1f} s (allowed {allowed:.1f} s), largest peak RSS {worst_rss:.2f} GB "
          f"(goal ≤ 4 GB)")


if __name__ == "__main__":
    main()
