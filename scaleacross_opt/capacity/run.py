"""``sweep``: solve (or compare methods on) every point of a grid of instance variants, resumably."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, InputIssue
from ..spec import Instance
from .executors import ExecutorName, available_cpus, cpus_per_point, run
from .grid import Axis, points
from .paths import expand, parse_path
from .point import PointTask
from .store import ResultStore, SweepRecord, instance_digest, point_key


def _check_paths(instance: Instance, paths: Sequence[str], source: str) -> None:
    """InputError for a varied path that the base instance does not have (before any point is solved)."""
    document = instance.model_dump(mode="json")
    issues = []
    for path in paths:
        try:
            expand(document, parse_path(path))
        except ValueError as err:
            issues.append(InputIssue(source, path, str(err)))
    if issues:
        raise InputError(issues)


def sweep(instance: Instance, vary: Mapping[str, Sequence[Any]], *, out: str | Path,
          methods: Sequence[str] | None = None, executor: ExecutorName = "local", workers: int | None = None,
          time_limit_s: float = 60.0, seed: int = 0, source: str = "<instance>",
          progress: Callable[[int, int], None] | None = None) -> list[SweepRecord]:
    """Evaluate every point of the Cartesian product of ``vary`` (dotted path -> values) and return their records.

    Each point is ``instance.with_updates(point)``, solved with ``time_limit_s`` and ``seed`` (or, with
    ``methods``, compared: ``scaleacross_opt.compare``). Each finished point is appended to the JSON Lines file
    ``out`` at once; points already there (same base instance, parameters, seed, time limit and methods) are
    not run again, so an interrupted sweep resumes where it stopped. ``executor`` is ``"local"`` (a process
    pool of ``workers`` processes, default one per CPU) or ``"ray"`` (see ``executors.run_ray``); each point's
    solves run as many CP-SAT workers as the CPUs it reserves (``executors.cpus_per_point``), so concurrent
    points do not oversubscribe the cores.
    ``progress(done, total)`` is called at the start and after each point. Returns the records in grid order
    (the first path varies slowest); a point without a plan has status ``infeasible``, ``no_plan_in_time`` or
    ``input_error`` (its value is out of bounds, …) and the reason.
    """
    _check_paths(instance, list(vary), source)
    grid = points([Axis(path, tuple(values)) for path, values in vary.items()])
    digest = instance_digest(instance)
    chosen = tuple(methods) if methods is not None else None
    workers = workers or len(available_cpus())
    threads = cpus_per_point(workers, len(available_cpus()))
    tasks = [PointTask(instance, digest, source, params, seed, time_limit_s, chosen, threads) for params in grid]
    keys = [point_key(digest, params, seed, time_limit_s, list(chosen) if chosen is not None else None)
            for params in grid]
    store = ResultStore(Path(out))
    done = store.load()
    todo = [task for task, key in zip(tasks, keys, strict=True) if key not in done]
    finished = len(tasks) - len(todo)
    if progress:
        progress(finished, len(tasks))
    if todo:
        for record in run(executor, todo, workers):
            store.append(record)
            done[record.key] = record
            finished += 1
            if progress:
                progress(finished, len(tasks))
    return [done[key] for key in keys]
