"""The `scaleacross-opt` command line.

Exit codes: 0 ok, 1 invalid input, 2 usage, 3 infeasible, 4 internal error. Machine output goes to
stdout (``--json``); messages and progress go to stderr.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import InfeasibleError, InputError, InputIssue

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INFEASIBLE, EXIT_INTERNAL = 0, 1, 2, 3, 4


def _fail(lines: list[str], code: int) -> None:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


def handle_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the package's errors into one-line messages and exit codes, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InputError as err:
            _fail([str(issue) for issue in err.issues], EXIT_INVALID)
        except InfeasibleError as err:
            _fail([f"infeasible: {err.reason}"], EXIT_INFEASIBLE)
        except (click.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except Exception as err:  # an internal bug: say so plainly; --debug shows the traceback
            if click.get_current_context().find_root().params.get("debug"):
                raise
            _fail([f"internal error: {type(err).__name__}: {err} (rerun with --debug for a traceback)"],
                  EXIT_INTERNAL)

    return wrapper


def _emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=False) if as_json else text)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="scaleacross-opt")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def main(debug: bool) -> None:
    """Plan LLM training across data-center buildings: placement × schedule × network."""


def _document_kind(data: Any) -> str:
    if isinstance(data, dict) and {"name", "description", "cluster", "job", "search"} & set(data) \
            and "hidden_size" not in data:
        return "instance"
    if isinstance(data, dict) and "hidden_size" in data:
        return "model"
    return "plan"


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--instance", "instance_path", type=click.Path(path_type=Path),
              help="Check plan files against this instance.")
@handle_errors
def validate(files: tuple[Path, ...], instance_path: Path | None) -> None:
    """Check instance, model or plan FILES; print one line per problem (exit 1 if any)."""
    from .io import load_instance, load_model, load_plan, read_document

    instance = load_instance(instance_path) if instance_path else None
    issues: list[InputIssue] = []
    for path in files:
        try:
            kind = _document_kind(read_document(path))
            if kind == "instance":
                load_instance(path)
            elif kind == "model":
                load_model(path)
            else:
                load_plan(path, instance)
            click.echo(f"{path}: ok ({kind})")
        except InputError as err:
            issues += err.issues
    if issues:
        raise InputError(issues)


@main.command()
@click.argument("kind", type=click.Choice(["instance", "plan", "model"]))
def schema(kind: str) -> None:
    """Print the JSON Schema of an instance, plan or model file."""
    from .schema_export import json_schema

    click.echo(json.dumps(json_schema(kind), indent=2))


def _load_instance_and_plan(instance_path: Path, plan_path: Path) -> tuple[Any, Any]:
    from .io import load_instance, load_plan

    instance = load_instance(instance_path)
    return instance, load_plan(plan_path, instance)


def _report_text(report: Any) -> str:
    lines = [
        f"step time      {report.step_time_s:.4f} s" + ("  (simulated)" if report.simulated else "  (estimate)"),
        f"MFU            {report.mfu * 100:.1f} %",
        f"tokens/s       {report.tokens_per_s:,.0f}",
        f"memory/GPU     {report.memory_gib_per_gpu:.1f} GiB" + ("" if report.fits_memory else "  DOES NOT FIT"),
        "breakdown:",
    ]
    lines += [f"  {key:<14} {value:.4f} s" for key, value in report.breakdown.items()]
    return "\n".join(lines)


_instance_arg = click.argument("instance_path", metavar="INSTANCE", type=click.Path(path_type=Path))
_plan_opt = click.option("--plan", "plan_path", required=True, type=click.Path(path_type=Path),
                         help="Plan file (JSON/YAML; placement and network may be omitted).")
_json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


@main.command()
@_instance_arg
@_plan_opt
@_json_opt
@handle_errors
def estimate(instance_path: Path, plan_path: Path, as_json: bool) -> None:
    """Closed-form step-time estimate of PLAN on INSTANCE."""
    from .cost.step import estimate as estimate_step

    instance, plan = _load_instance_and_plan(instance_path, plan_path)
    report = estimate_step(instance, plan)
    _emit(report.to_json(), as_json, _report_text(report))


@main.command()
@_instance_arg
@_plan_opt
@_json_opt
@click.option("--trace", "trace_path", type=click.Path(path_type=Path),
              help="Write a Chrome-trace / Perfetto timeline here.")
@handle_errors
def simulate(instance_path: Path, plan_path: Path, as_json: bool, trace_path: Path | None) -> None:
    """Discrete-event simulation of one step of PLAN on INSTANCE."""
    from .simulator import simulate as simulate_step

    instance, plan = _load_instance_and_plan(instance_path, plan_path)
    report = simulate_step(instance, plan, trace_path=trace_path)
    _emit(report.to_json(), as_json, _report_text(report))
    if trace_path:
        click.echo(f"trace written to {trace_path}", err=True)


@main.command()
@_instance_arg
@click.option("--time-limit", "time_limit_s", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Wall-clock budget in seconds.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same plan).")
@click.option("--top-k", type=click.IntRange(min=1), default=8, show_default=True,
              help="Candidates simulated per refinement round.")
@_json_opt
@click.option("--out", "out_path", type=click.Path(path_type=Path), help="Write the plan here (feeds simulate --plan).")
@handle_errors
def solve(instance_path: Path, time_limit_s: float, seed: int, top_k: int, as_json: bool,
          out_path: Path | None) -> None:
    """Find the plan with the shortest simulated step for INSTANCE."""
    from .io import load_instance, write_atomic
    from .optimizer import solve as solve_instance
    from .optimizer.summary import summary_text

    instance = load_instance(instance_path)
    result = solve_instance(instance, time_limit_s=time_limit_s, seed=seed, top_k=top_k,
                            progress=lambda msg: click.echo(msg, err=True))
    if out_path:
        write_atomic(out_path, json.dumps(result.plan.model_dump(mode="json"), indent=2) + "\n")
    _emit(result.to_json(), as_json, summary_text(instance, result))


@main.command()
@_instance_arg
def compare(instance_path: Path) -> None:
    """Compare the planner with heuristic baselines (not implemented yet)."""
    _fail(["compare is not implemented yet: it lands with the baselines issue"], EXIT_USAGE)
