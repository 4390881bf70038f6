"""A sweep's records as rows: one per point and method (a point without a plan gives one row with its reason)."""

from __future__ import annotations

import csv
import io
from typing import Any

from .store import SweepRecord

METRICS = ("step_time_s", "mfu", "speedup_vs_production_pct")


def _plan_summary(plan: dict[str, Any] | None) -> str:
    if not plan:
        return ""
    return (f"tp{plan['tp']} cp{plan['cp']} pp{plan['pp']} dp{plan['dp']} v{plan['virtual_stages']} "
            f"mbs{plan['micro_batch_size']} {plan['schedule']} ZeRO-{plan['zero_stage']}")


def rows(records: list[SweepRecord]) -> list[dict[str, Any]]:
    """Flat rows: the varied parameters, then status, method, metrics, cross-building dimension and plan."""
    out = []
    for record in records:
        head = {**record.params, "seed": record.seed, "time_limit_s": record.time_limit_s, "status": record.status}
        for result in record.results or [None]:
            out.append({**head, "reason": record.reason or (result.reason if result else None) or "",
                        "method": result.method if result else "",
                        **{m: getattr(result, m) if result else None for m in METRICS},
                        "cross_building": result.cross_building if result else "",
                        "solver_status": result.status if result else "",
                        "plan": _plan_summary(result.plan if result else None)})
    return out


def csv_text(records: list[SweepRecord]) -> str:
    """``rows`` as CSV (empty cells for missing values)."""
    table = rows(records)
    if not table:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(table[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in table)
    return buffer.getvalue()
