"""Where a sweep's points run: a local process pool, or Ray tasks on a local or existing cluster.

Both yield each point's record as it finishes, in completion order; the caller stores it at once. A point's
result depends only on its task (instance, seed, time limit), not on the executor. Each point gets
``cpus_per_point`` CPUs: the local pool pins every worker process to its own CPUs (Linux), Ray reserves them
per task; the CP-SAT threads of one solve then share those CPUs instead of competing with other points.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from typing import Literal

from .point import PointTask, run_point
from .store import SweepRecord

ExecutorName = Literal["local", "ray"]
EXECUTORS: tuple[ExecutorName, ...] = ("local", "ray")


def available_cpus() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cpus_per_point(workers: int, cpus: int) -> int:
    """CPUs each of ``workers`` concurrent points gets out of ``cpus`` (at least one)."""
    return max(1, cpus // workers)


PARENT_POLL_S = 1.0  # how often a worker checks that the sweep that started it is still alive


def _exit_with_parent(parent: int) -> None:
    """End this worker once its parent is gone (a killed sweep must not leave solving orphans behind)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _init_worker(cpu_sets: multiprocessing.Queue) -> None:
    """Pool initializer: run this worker on one CPU set only, and end it with its parent."""
    cpus = cpu_sets.get()
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def run_local(tasks: list[PointTask], workers: int) -> Iterator[SweepRecord]:
    """Run ``tasks`` on ``workers`` forked processes.

    Forked, not spawned: a spawned worker re-imports the caller's ``__main__``, which breaks scripts without an
    ``if __name__ == "__main__"`` guard; the sweep's parent runs no solver threads of its own to fork."""
    context = multiprocessing.get_context("fork")
    cpus = available_cpus()
    share = cpus_per_point(workers, len(cpus))
    cpu_sets = context.Queue()
    for i in range(workers):  # disjoint CPU sets when there are enough CPUs, else no pinning
        cpu_sets.put(cpus[i * share:(i + 1) * share] if workers <= len(cpus) else [])
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(workers, len(tasks)) or 1, mp_context=context,
                                                initializer=_init_worker, initargs=(cpu_sets,)) as pool:
        futures = [pool.submit(run_point, task) for task in tasks]
        try:
            for future in concurrent.futures.as_completed(futures):
                yield future.result()
        except BaseException:  # Ctrl-C, or the caller stopped: drop the points not started, do not wait for them
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_ray(tasks: list[PointTask], workers: int) -> Iterator[SweepRecord]:
    """Run ``tasks`` as Ray tasks of ``cpus_per_point`` CPUs each.

    With ``RAY_ADDRESS`` set, joins that cluster (points are spread over its CPUs); otherwise starts a local
    Ray instance with ``workers`` × CPUs-per-point CPUs. Ray is shut down afterwards in both cases."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("the ray executor needs Ray: pip install 'scaleacross-opt[ray]'") from None
    share = cpus_per_point(workers, len(available_cpus()))
    joining = bool(os.environ.get("RAY_ADDRESS"))
    ray.init(**({} if joining else {"num_cpus": workers * share}), include_dashboard=False,
             log_to_driver=False, logging_level=logging.WARNING)
    pending = []
    try:
        remote = ray.remote(num_cpus=share, max_retries=0)(run_point)
        pending = [remote.remote(task) for task in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        ray.shutdown()


def run(executor: ExecutorName, tasks: list[PointTask], workers: int) -> Iterator[SweepRecord]:
    """Records of ``tasks`` as they finish, on ``executor``."""
    return run_local(tasks, workers) if executor == "local" else run_ray(tasks, workers)
