"""The sweep's results file: JSON Lines, one record per finished point, appended as each point finishes.

Each record is written with one ``write`` of the whole line, then flushed and fsynced, so a crash or SIGKILL
leaves every earlier line intact and at most a torn last line, which ``load`` cuts off. A point's identity
(``SweepRecord.key``) is the base instance's digest, its parameters, the seed, the time limit and the methods:
re-running a sweep skips the points already in the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import InputError, InputIssue
from ..spec import Instance

Status = Literal["ok", "infeasible", "no_plan_in_time", "input_error"]


class MethodResult(BaseModel):
    """One method's answer at a point (``solve``, or a row of ``compare``)."""

    model_config = ConfigDict(extra="forbid")

    method: str
    step_time_s: float | None = None
    mfu: float | None = None
    speedup_vs_production_pct: float | None = None
    wall_s: float | None = None
    simulator_calls: int | None = None
    status: str | None = None  # the solver's status (optimal, time_limit, …) where the method reports one
    reason: str | None = None  # why a compared method has no plan
    plan: dict[str, Any] | None = None

    @property
    def cross_building(self) -> str | None:
        """The dimension the plan splits across buildings (none, pp, dp, pp+dp)."""
        placement = (self.plan or {}).get("placement") or {}
        return placement.get("cross_building")


class SweepRecord(BaseModel):
    """One finished point of a sweep: a line of the results file."""

    model_config = ConfigDict(extra="forbid")

    instance: str  # digest of the base instance (instance_digest)
    params: dict[str, Any]  # varied path -> value
    seed: int
    time_limit_s: float
    methods: list[str] | None  # None: plain solve
    status: Status
    reason: str = ""  # why the point has no plan (infeasible, no plan in time, input error)
    results: list[MethodResult] = []

    @property
    def key(self) -> str:
        """The point's identity: what decides whether a re-run solves it again."""
        return point_key(self.instance, self.params, self.seed, self.time_limit_s, self.methods)


def point_key(instance: str, params: dict[str, Any], seed: int, time_limit_s: float, methods: list[str] | None) -> str:
    """Canonical JSON of a point's identity."""
    return json.dumps({"instance": instance, "params": params, "seed": seed, "time_limit_s": float(time_limit_s),
                       "methods": methods}, sort_keys=True)


def instance_digest(instance: Instance) -> str:
    """A short digest of the validated instance (a changed base instance makes every point new)."""
    return hashlib.sha256(json.dumps(instance.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


class ResultStore:
    """Append-only JSON Lines file of ``SweepRecord``s."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, SweepRecord]:
        """Records by key (the first of a repeated key); a torn last line is cut off the file.

        InputError ``FILE: line N: …`` if a complete line is not a record (not a file this command wrote)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as err:
            raise InputError([InputIssue(str(self.path), "", f"cannot read file: {err.strerror or err}")]) from None
        complete = data[:data.rfind(b"\n") + 1]
        if len(complete) < len(data):  # a write cut short by a kill: drop the partial line
            with self.path.open("r+b") as handle:
                handle.truncate(len(complete))
                os.fsync(handle.fileno())
        records: dict[str, SweepRecord] = {}
        for number, line in enumerate(complete.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = SweepRecord.model_validate_json(line)
            except ValidationError as err:
                first = err.errors(include_url=False)[0]
                raise InputError([InputIssue(str(self.path), f"line {number}", "not a sweep record: "
                                             f"{first['msg']}")]) from None
            records.setdefault(record.key, record)
        return records

    def append(self, record: SweepRecord) -> None:
        """Append one record as a single write of a complete line, flushed to disk before returning."""
        line = (record.model_dump_json() + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write to {self.path} ({written} of {len(line)} bytes)")
            os.fsync(fd)
        finally:
            os.close(fd)
