"""The ``sweep`` and ``requirement`` commands (registered in ``cli.py``)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..cli import (
    EXIT_INFEASIBLE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_NO_PLAN_IN_TIME,
    TIME_LIMIT_S,
    _cannot_write,
    _distinct_outputs,
    _fail,
    _finite_time_limit,
    _load_instance,
    _plan_lines,
    _writable_path,
    _write_atomic,
    handle_errors,
)
from .executors import EXECUTORS
from .grid import Axis, parse_axis

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _axes(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[Axis]:
    try:
        axes = [parse_axis(spec) for spec in value]
    except ValueError as err:
        raise click.BadParameter(str(err), ctx, param) from None
    paths = [axis.path for axis in axes]
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    if repeated:
        raise click.BadParameter(f"a field is varied twice: {', '.join(repeated)}", ctx, param)
    return axes


def _methods(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    from ..compare import method_names

    names = [name.strip() for name in value.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise click.BadParameter(f"{value!r}: expected distinct method names separated by commas", ctx, param)
    unknown = [name for name in names if name not in method_names()]
    if unknown:
        raise click.BadParameter(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(method_names())}", ctx,
                                 param)
    return names


def _fraction(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """``5%`` or ``0.05``."""
    text = value.strip()
    try:
        number = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (5%) or a fraction (0.05)", ctx, param) from None
    if not math.isfinite(number) or number <= 0:
        raise click.BadParameter(f"{value!r} must be above 0", ctx, param)
    return number


def _save_png(fig: Figure, path: Path) -> None:
    """Write ``fig`` whole or not at all; a write failure is invalid output (exit 1)."""
    from ..compare import save_png

    try:
        save_png(fig, path)
    except OSError as err:
        _cannot_write(path, err)


@contextmanager
def _progress_bar(quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr (points done, elapsed, ETA); None when quiet or stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=Console(stderr=True)) as bar:
        task = bar.add_task("sweep", total=None)

        def update(done: int, total: int) -> None:
            if bar.tasks[0].total is None:  # the first call: points already in the file count as done, untimed
                bar.update(task, total=total)
                bar.tasks[0].completed = done
            else:
                bar.update(task, completed=done)

        yield update


def _point_line(record: Any) -> str:
    params = " ".join(f"{path}={value}" for path, value in record.params.items())
    if record.status != "ok":
        return f"{params}: {record.status}: {record.reason}"
    parts = [f"{r.method} {r.step_time_s:.4f} s, MFU {r.mfu * 100:.1f} %, cross {r.cross_building}"
             + (f", {r.speedup_vs_production_pct:+.1f} % vs production" if r.speedup_vs_production_pct is not None
                else "") for r in record.results if r.step_time_s is not None]
    return f"{params}: " + "; ".join(parts)


# A point's failure status -> the exit code of the same error from `solve` (a sweep without any plan exits so).
_EXIT_CODES = {"input_error": EXIT_INVALID, "infeasible": EXIT_INFEASIBLE, "no_plan_in_time": EXIT_NO_PLAN_IN_TIME}

_instance_arg = click.argument("instance_path", metavar="INSTANCE", type=click.Path(path_type=Path))
_time_limit_opt = click.option("--time-limit", "time_limit_s", type=TIME_LIMIT_S, default=60.0,
                               show_default=True, callback=_finite_time_limit, help="Seconds per solve.")
_seed_opt = click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
                         help="Random seed of every solve.")
_plot_opt = click.option("--plot", "plot_path", type=click.Path(path_type=Path), callback=_writable_path,
                         help="Write a PNG plot here.")


@click.command()
@_instance_arg
@click.option("--vary", "axes", multiple=True, required=True, callback=_axes, metavar="PATH=VALUES",
              help="A field and its values: PATH=V1,V2,… or a geometric range PATH=START..STOPxFACTOR "
                   "(e.g. 'cluster.links[*].bandwidth_gbps=100..1600x2'); repeat for a Cartesian product.")
@click.option("--methods", callback=_methods, help="Compare these methods at each point (as `compare`), "
                                                    "comma-separated; default: solve only.")
@click.option("--out", "out_path", required=True, type=click.Path(path_type=Path), callback=_writable_path,
              help="JSON Lines results file; points already in it are skipped (resume).")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="local: a process pool; ray: Ray tasks (RAY_ADDRESS joins a cluster, else a local one starts).")
@click.option("--workers", type=click.IntRange(min=1), help="Points solved at once (default: one per CPU).")
@_time_limit_opt
@_seed_opt
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), callback=_writable_path,
              help="Write the results as CSV here.")
@_plot_opt
@click.option("--quiet", is_flag=True, help="No progress bar or summary on stderr.")
@handle_errors
def sweep(instance_path: Path, axes: list[Axis], methods: list[str] | None, out_path: Path, executor: str,
          workers: int | None, time_limit_s: float, seed: int, csv_path: Path | None, plot_path: Path | None,
          quiet: bool) -> None:
    """Solve INSTANCE at every combination of the --vary values; one line per point on stdout.

    If no point has a plan, exit with the first point's error code (1, 3 or 5) and write no --csv or --plot."""
    from .plot import sweep_figure
    from .run import sweep as run_sweep
    from .table import csv_text

    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise click.UsageError("--executor ray needs Ray: pip install 'scaleacross-opt[ray]'")
    claimed: dict[Path, str] = {}
    for option, path in [("--out", out_path), ("--csv", csv_path), ("--plot", plot_path)]:
        if path is not None:
            _distinct_outputs((option, path), instance_path)
            if claimed.setdefault(path.resolve(), option) != option:
                raise click.BadParameter(f"'{path}' is also the {claimed[path.resolve()]} file",
                                         param_hint=f"'{option}'")
    instance = _load_instance(instance_path)
    try:
        with _progress_bar(quiet) as progress:
            records = run_sweep(instance, {axis.path: axis.values for axis in axes}, out=out_path, methods=methods,
                                executor=executor, workers=workers, time_limit_s=time_limit_s, seed=seed,
                                source=str(instance_path), progress=progress)
    except KeyboardInterrupt:
        _fail([f"interrupted: finished points are in {out_path}; run the same command again to resume"],
              EXIT_INTERRUPTED)
    for record in records:
        click.echo(_point_line(record))
    if not any(record.status == "ok" for record in records):
        _fail([f"no point succeeded ({len(records)} points; results in {out_path}); the first: "
               f"{_point_line(records[0])}"], _EXIT_CODES[records[0].status])
    if csv_path:
        _write_atomic(csv_path, csv_text(records))
    if plot_path:
        _save_png(sweep_figure(records), plot_path)
    if not quiet:
        statuses = [r.status for r in records]
        counts = {status: statuses.count(status) for status in dict.fromkeys(statuses)}
        click.echo(f"{len(records)} points ({', '.join(f'{n} {s}' for s, n in counts.items())}); results in {out_path}"
                   + "".join(f", {p}" for p in (csv_path, plot_path) if p), err=True)


@click.command()
@_instance_arg
@click.option("--field", "field_path", required=True, metavar="PATH",
              help="A bandwidth_gbps or latency_us field, e.g. 'cluster.links[*].bandwidth_gbps'.")
@click.option("--within", type=str, callback=_fraction, default="5%", show_default=True,
              help="Allowed step above the ideal-link step (5% or 0.05).")
@click.option("--precision", type=str, callback=_fraction, default="2%", show_default=True,
              help="Bisection stops when the bracket's ends differ by less than this.")
@_time_limit_opt
@_seed_opt
@_plot_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@handle_errors
def requirement(instance_path: Path, field_path: str, within: float, precision: float, time_limit_s: float,
                seed: int, plot_path: Path | None, as_json: bool, quiet: bool) -> None:
    """Smallest bandwidth (largest latency) of --field at which the best step is within --within of ideal links."""
    from ..spec import Plan
    from .plot import requirement_figure
    from .requirement import requirement as ask

    _distinct_outputs(("--plot", plot_path), instance_path)
    instance = _load_instance(instance_path)
    answer = ask(instance, field_path, within=within, time_limit_s=time_limit_s, seed=seed, precision=precision,
                 source=str(instance_path), progress=None if quiet else lambda msg: click.echo(msg, err=True))
    if as_json:
        click.echo(json.dumps(answer.to_json(), indent=2))
    else:
        bandwidth = field_path.endswith("bandwidth_gbps")
        at = answer.at_value
        if at is None:
            click.echo(f"{field_path}: no value within the schema's bounds keeps the step within {within:.1%} of "
                       f"ideal links ({answer.ideal_step_time_s:.4f} s)")
        else:
            click.echo(f"{field_path} {'≥' if bandwidth else '≤'} {answer.value:.6g}: best step "
                       f"{at.step_time_s:.4f} s, within {within:.1%} of {answer.ideal_step_time_s:.4f} s with "
                       "ideal links")
            click.echo("\n".join(_plan_lines(Plan.model_validate(at.plan))))
        click.echo("measured curve (value, best step, meets target):")
        for point in sorted(answer.curve, key=lambda p: p.value):
            click.echo(f"  {point.value:>14.6g}  {point.step_time_s:9.4f} s  {'yes' if point.meets_target else 'no'}")
        trend = "non-increasing in bandwidth" if bandwidth else "non-decreasing in latency"
        click.echo(f"monotone: the best step is {trend}" + (" (checked on the measured curve)" if not answer.violations
                   else f"; VIOLATED by {len(answer.violations)} pair(s) of measured points (a solve cut short by its "
                        "time limit? raise --time-limit)"))
    if plot_path:
        _save_png(requirement_figure(answer), plot_path)
