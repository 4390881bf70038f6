"""Chrome-trace / Perfetto JSON export of a simulated step (load in ui.perfetto.dev or chrome://tracing).

Processes: one per (group, stage) with threads "compute" and "dp-comm", then one "links" process
with a thread per contention resource of each group. Events are complete events (``ph: "X"``)
with ``ts`` / ``dur`` in µs; metadata events name processes and threads.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..cost.workload import StepWorkload
from ..io import write_atomic
from ..schedules.base import OpKind
from .engine import SimResult

_US = 1e6


def trace_events(result: SimResult, workload: StepWorkload) -> list[dict[str, object]]:
    """All trace events of ``result`` (metadata first)."""
    graph, pp = result.graph, result.graph.pp
    events: list[dict[str, object]] = []

    def meta(pid: int, tid: int | None, what: str, name: str) -> None:
        ev: dict[str, object] = {"ph": "M", "pid": pid, "name": what, "args": {"name": name}}
        if tid is not None:
            ev["tid"] = tid
        events.append(ev)

    def span(pid: int, tid: int, name: str, start: float, end: float, args: dict[str, object]) -> None:
        events.append({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": start * _US,
                       "dur": (end - start) * _US, "args": args})

    kinds = [OpKind(k).name for k in graph.kind.tolist()]
    links_pid = len(result.groups) * pp
    meta(links_pid, None, "process_name", "links")
    link_tid = 0
    for g, (timeline, group) in enumerate(zip(result.groups, workload.groups, strict=True)):
        for s in range(pp):
            pid = g * pp + s
            meta(pid, None, "process_name", f"{timeline.name} stage {s} ({group.stage_building[s]})")
            meta(pid, 0, "thread_name", "compute")
            meta(pid, 1, "thread_name", "dp-comm")
            jobs = workload.dp_jobs
            for j in np.flatnonzero(jobs.stage == s).tolist():
                c, bucket = int(jobs.chunk[j]), round(float(jobs.needed_at[j] / jobs.part[j]))
                args = {"chunk": c, "bucket": bucket}
                span(pid, 1, f"dp-sync chunk {c} bucket {bucket}", result.dp_start_s[j], result.dp_end_s[j], args)
                if result.gather_end_s.any():
                    span(pid, 1, f"param-gather chunk {c} bucket {bucket}", result.gather_start_s[j],
                         result.gather_end_s[j], args)
            span(pid, 0, "optimizer", result.optimizer_start_s, result.optimizer_end_s, {})
        for i, (s, mb, c, k, t0, t1) in enumerate(zip(
            graph.stage.tolist(), graph.microbatch.tolist(), graph.chunk.tolist(), graph.position.tolist(),
            timeline.start.tolist(), timeline.end.tolist(), strict=True,
        )):
            span(g * pp + s, 0, f"{kinds[i]}{mb}.{c}", t0, t1, {"microbatch": mb, "chunk": c, "position": k})
        for r, name in enumerate(timeline.resources):
            meta(links_pid, link_tid + r, "thread_name", f"{timeline.name} {name}")
        for i in np.flatnonzero(timeline.resource >= 0).tolist():
            src = int(graph.stage[graph.data_dep[i]])
            span(links_pid, link_tid + int(timeline.resource[i]), f"{kinds[i]}{graph.microbatch[i]} {src}->"
                 f"{graph.stage[i]}", float(timeline.send[i]), float(timeline.arrive[i]), {"bytes": workload.p2p_bytes})
        link_tid += len(timeline.resources)
    return events


def write_trace(path: Path, result: SimResult, workload: StepWorkload, metadata: dict | None = None) -> None:
    """Write ``{"traceEvents": [...], "metadata": {...}}`` to ``path`` (atomically: never a half-written
    file); ``metadata`` (what was simulated: instance, plan, step time) is kept by Perfetto / chrome://tracing."""
    document = {"traceEvents": trace_events(result, workload), "displayTimeUnit": "ms", "metadata": metadata or {}}
    write_atomic(path, json.dumps(document))
