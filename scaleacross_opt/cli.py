"""The `scaleacross-opt` command line.

Exit codes: 0 ok, 1 invalid input, 2 usage, 3 infeasible, 4 internal error, 5 no plan in time, 130 interrupted
(Ctrl-C).
Machine output goes to stdout (``--json``); messages and progress go to stderr.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import InfeasibleError, InputError, InputIssue, NoPlanInTimeError
from .spec.bounds import MAX_TIME_LIMIT_S

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INFEASIBLE, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_NO_PLAN_IN_TIME = 5  # the time limit ended the search before any plan (not proven infeasible)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


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
        except NoPlanInTimeError as err:
            _fail([f"no plan in time: {err.reason}"], EXIT_NO_PLAN_IN_TIME)
        except (click.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except KeyboardInterrupt:
            _fail(["interrupted: nothing written"], EXIT_INTERRUPTED)
        except OSError as err:
            if err.filename is None and err.errno in _OUTPUT_ERRNOS:  # stdout/stderr cannot be written
                with contextlib.suppress(OSError):
                    _fail([f"cannot write output: {err.strerror}"], EXIT_INVALID)
                sys.exit(EXIT_INVALID)
            _internal_error(err)
        except Exception as err:
            _internal_error(err)

    return wrapper


_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EPIPE, errno.EIO, errno.EBADF, errno.EDQUOT)


def _internal_error(err: Exception) -> None:
    """An internal bug: say so plainly; --debug shows the traceback."""
    if click.get_current_context().find_root().params.get("debug"):
        raise err
    _fail([f"internal error: {type(err).__name__}: {err} (rerun with --debug for a traceback)"], EXIT_INTERNAL)


def _emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=False) if as_json else text)


def _floor_text(floor: Any) -> str:
    """One readable line: the physical floor and the resource that sets it."""
    return f"physical floor: {floor.seconds:.4f} s (binding: {floor.binding.resource})"


def _floor_json(floor: Any) -> dict[str, Any]:
    """The floor's keys in ``--json`` output."""
    return {"physical_floor_s": floor.seconds, "physical_floor_binding": floor.binding.resource}


# ----------------------------------------------------------------------------- output files

def _writable_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Reject an output path that cannot be written before any work is done (usage error, exit 2).

    The directory is probed with a nameless temporary file, as the atomic writers create theirs there
    (``os.access`` says yes to root even where no file can be created, e.g. /proc)."""
    if value is None:
        return None
    parent = value.parent
    if value.is_dir():
        raise click.BadParameter(f"'{value}' is a directory; give a file name", ctx, param)
    if not parent.is_dir():
        raise click.BadParameter(f"directory '{parent}' does not exist", ctx, param)
    try:
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as err:
        raise click.BadParameter(f"directory '{parent}' is not writable ({err.strerror or err})", ctx, param) from None
    return value


def _cannot_write(path: Path, err: OSError) -> None:
    _fail([f"{path}: cannot write: {err.strerror or err}"], EXIT_INVALID)


def _write_atomic(path: Path, text: str) -> None:
    """``io.write_atomic``, with a write failure reported as invalid output (exit 1)."""
    from .io import write_atomic

    try:
        write_atomic(path, text)
    except OSError as err:
        _cannot_write(path, err)


def _distinct_outputs(output: tuple[str, Path | None], *inputs: Path) -> None:
    """Refuse to overwrite an input file with an output (e.g. ``--out`` naming the instance)."""
    option, path = output
    if path is None:
        return
    for other in inputs:
        with contextlib.suppress(OSError):
            if path.exists() and other.exists() and path.samefile(other):
                raise click.BadParameter(f"'{path}' is also an input file; refusing to overwrite it",
                                         param_hint=f"'{option}'")


TIME_LIMIT_S = click.FloatRange(min=0.1, max=MAX_TIME_LIMIT_S)  # seconds of a solve or search


def _finite_time_limit(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if math.isnan(value):
        raise click.BadParameter("must be a number of seconds, not nan", ctx, param)
    return value


_EPILOG = ("Exit codes: 0 ok, 1 invalid input, 2 usage, 3 infeasible, 4 internal error, 5 no plan in time, "
           "130 interrupted.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=_EPILOG)
@click.version_option(__version__, prog_name="scaleacross-opt")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
def main(debug: bool) -> None:
    """Plan LLM training across data-center buildings: placement × schedule × network."""


def _document_kind(data: Any) -> str | None:
    """"instance", "model" or "plan" by the top-level keys that only that kind has; None if no key fits."""
    from .spec import Instance, ModelSpec, Plan

    if not isinstance(data, dict):
        return "plan"  # the plan loader reports "expected a mapping at the top level"
    fields = {"instance": set(Instance.model_fields), "model": set(ModelSpec.model_fields),
              "plan": set(Plan.model_fields) | {"plan"}}  # a `solve --json` result holds its plan under "plan"
    keys = set(data)
    scores = {kind: len(keys & (own - set().union(*(f for k, f in fields.items() if k != kind))))
              for kind, own in fields.items()}
    best = max(scores, key=lambda kind: scores[kind])
    if scores[best]:
        return best
    if keys & fields["instance"]:  # only shared keys such as `name`: report what an instance lacks
        return "instance"
    return None


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--instance", "instance_path", type=click.Path(path_type=Path),
              help="Check plan files against this instance.")
@handle_errors
def validate(files: tuple[Path, ...], instance_path: Path | None) -> None:
    """Check instance, model or plan FILES; print one line per problem (exit 1 if any)."""
    from .io import load_instance, load_model, load_plan, read_document
    from .validation.physical_floor import physical_floor
    from .validation.plan_checks import check_memory

    instance = _load_instance(instance_path) if instance_path else None
    issues: list[InputIssue] = []
    for path in files:
        try:
            data = read_document(path)
            kind = _document_kind(data)
            floor = None
            if kind is None:
                names = [str(key) for key in data]
                keys = ", ".join(names[:6]) + (f", … ({len(names)} keys)" if len(names) > 6 else "") or "none"
                raise InputError([InputIssue(str(path), "", (
                    f"not an instance, model or plan file (top-level keys: {keys}); an instance has "
                    "cluster and job, a model has layers and hidden_size, a plan has tp, pp and dp"))])
            if kind == "instance":
                load_instance(path)
            elif kind == "model":
                load_model(path)
            elif instance is None:
                load_plan(path)
            else:
                plan = load_plan(path, instance)
                problems = check_memory(plan, instance)
                if problems:
                    raise InputError([InputIssue(str(path), field, msg) for field, msg in problems])
                floor = physical_floor(instance, plan)
            unchecked = kind == "plan" and instance is None
            click.echo(f"{path}: ok ({kind}" + (", schema only: add --instance to check it against an instance)"
                                                  if unchecked else ")"))
            if floor is not None:
                click.echo(_floor_text(floor))
        except InputError as err:
            issues += err.issues
    if issues:
        raise InputError(issues)


@main.command(name="list")
@click.argument("kind", type=click.Choice(["gpus", "models", "schedules"]))
@handle_errors
def list_catalog(kind: str) -> None:
    """List the catalog GPUs, the shipped models or the registered pipeline schedules."""
    if kind == "gpus":
        from .catalog.gpus import GPUS

        for name, gpu in sorted(GPUS.items()):
            click.echo(f"{name:<22} bf16 {gpu.peak_bf16_tflops:g} / fp8 {gpu.peak_fp8_tflops:g} TFLOP/s, "
                       f"{gpu.hbm_gib:g} GiB HBM, NVLink {gpu.nvlink_bandwidth_gb_per_s:g} GB/s × "
                       f"{gpu.nvlink_domain_size} GPUs, NIC {gpu.nic_bandwidth_gbps:g} Gb/s")
    elif kind == "models":
        from .io import MODELS_DIR, known_models, load_model

        for name in known_models():
            model = load_model(MODELS_DIR / f"{name}.yaml")
            moe = (f", MoE {model.moe.num_experts} experts top-{model.moe.top_k}" if model.moe else "")
            click.echo(f"{name:<16} {model.layers} layers, hidden {model.hidden_size}, {model.num_heads} heads "
                       f"({model.num_kv_heads} KV){moe}")
    else:
        from .schedules import get_schedule, schedule_names

        for name in schedule_names():
            click.echo(f"{name:<26} {get_schedule(name).description}")


@main.command()
@click.argument("kind", type=click.Choice(["instance", "plan", "model"]))
@handle_errors
def schema(kind: str) -> None:
    """Print the JSON Schema of an instance, plan or model file."""
    from .schema_export import json_schema

    click.echo(json.dumps(json_schema(kind), indent=2))


def _report_json(report: Any, plan: Any) -> dict[str, Any]:
    """The report plus the plan as evaluated (defaults filled in; the output is itself a valid --plan)."""
    return {**report.to_json(), "plan": plan.model_dump(mode="json")}


def _expect_kind(path: Path, expected: str, err: InputError) -> InputError:
    """``err``, or — when ``path`` holds another kind of file (arguments swapped?) — one plain line saying so."""
    from .io import read_document

    try:
        kind = _document_kind(read_document(path))
    except InputError:
        return err
    if kind is None or kind == expected:
        return err
    def named(word: str) -> str:
        return ("an " if word == "instance" else "a ") + word

    return InputError([InputIssue(str(path), "", f"{path.name} is {named(kind)}, expected {named(expected)} "
                                                 "(arguments swapped?)")])


def _load_instance(path: Path) -> Any:
    """The instance at ``path``; a plan or model file given instead is named as such."""
    from .io import load_instance

    try:
        return load_instance(path)
    except InputError as err:
        raise _expect_kind(path, "instance", err) from None


def _load_instance_and_plan(instance_path: Path, plan_path: Path) -> tuple[Any, Any]:
    from .io import load_plan

    instance = _load_instance(instance_path)
    try:
        return instance, load_plan(plan_path, instance)
    except InputError as err:
        raise _expect_kind(plan_path, "plan", err) from None


def _plan_lines(plan: Any) -> list[str]:
    """The plan as evaluated (defaults filled in), so a hand-written plan shows what was assumed."""
    from .optimizer.summary import plan_decisions

    lines = [f"plan           {plan_decisions(plan)}"]
    if plan.placement is not None:
        mode = plan.placement.cross_building.value

        def share(s: Any) -> str:
            return (f"{s.building} {s.dp_replicas} replica{'s' * (s.dp_replicas != 1)} × "
                    f"{s.pp_stages} stage{'s' * (s.pp_stages != 1)}"
                    + (f" (group {s.group})" if mode == "pp+dp" else ""))

        lines.append(f"placement      {'one building' if mode == 'none' else mode + ' across buildings'}: "
                     + ", ".join(share(s) for s in plan.placement.buildings))
    if plan.network is not None:
        classes = [("network        intra", plan.network.intra_building)]
        if plan.placement is None or plan.placement.cross_building.value != "none":
            classes.append(("               cross", plan.network.cross_building))
        for label, cfg in classes:
            lines.append(f"{label}: {cfg.collective_algorithm.value}, {cfg.load_balancing.value}, "
                         f"{cfg.congestion_control.value}, {cfg.loss_recovery.value}, "
                         f"{cfg.qps_per_connection} QP{'s' * (cfg.qps_per_connection != 1)} × "
                         f"{cfg.window_kib_per_qp} KiB")
    return lines


def _report_text(report: Any, plan: Any = None) -> str:
    lines = _plan_lines(plan) if plan is not None else []
    lines += [
        f"step time      {report.step_time_s:.4f} s" + ("  (simulated)" if report.simulated else "  (estimate)"),
        f"MFU            {report.mfu * 100:.1f} %",
        f"tokens/s       {report.tokens_per_s:,.0f}",
        f"memory/GPU     {report.memory_text}",
        "breakdown:",
    ]
    lines += [f"  {key.removesuffix('_s'):<13}{value:>9.4f} s" for key, value in report.breakdown.items()]
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
    from .validation.physical_floor import physical_floor

    instance, plan = _load_instance_and_plan(instance_path, plan_path)
    report = estimate_step(instance, plan)
    floor = physical_floor(instance, plan)
    _emit({**_report_json(report, plan), **_floor_json(floor)}, as_json,
          _report_text(report, plan) + "\n" + _floor_text(floor))


@main.command()
@_instance_arg
@_plan_opt
@_json_opt
@click.option("--trace", "trace_path", type=click.Path(path_type=Path), callback=_writable_path,
              help="Write a Chrome-trace / Perfetto timeline here.")
@handle_errors
def simulate(instance_path: Path, plan_path: Path, as_json: bool, trace_path: Path | None) -> None:
    """Discrete-event simulation of one step of PLAN on INSTANCE."""
    from .simulator import simulate as simulate_step
    from .validation.physical_floor import physical_floor

    _distinct_outputs(("--trace", trace_path), instance_path, plan_path)
    instance, plan = _load_instance_and_plan(instance_path, plan_path)
    try:
        report = simulate_step(instance, plan, trace_path=trace_path)  # the trace is written atomically
    except OSError as err:
        assert trace_path is not None
        _cannot_write(trace_path, err)
    floor = physical_floor(instance, plan)
    _emit({**_report_json(report, plan), **_floor_json(floor)}, as_json,
          _report_text(report, plan) + "\n" + _floor_text(floor))
    if trace_path:
        click.echo(f"trace written to {trace_path}", err=True)


@main.command()
@_instance_arg
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT_S, default=60.0, show_default=True,
              callback=_finite_time_limit, help="Wall-clock budget in seconds.")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="Random seed (same seed, same plan).")
@click.option("--top-k", type=click.IntRange(min=1), default=8, show_default=True,
              help="Candidates simulated per refinement round.")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="CP-SAT workers per round (default 4; the CPUs the solve may use).")
@_json_opt
@click.option("--out", "out_path", type=click.Path(path_type=Path), callback=_writable_path,
              help="Write the plan here (feeds simulate --plan).")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@handle_errors
def solve(instance_path: Path, time_limit_s: float, seed: int, top_k: int, threads: int | None, as_json: bool,
          out_path: Path | None, quiet: bool) -> None:
    """Find the plan with the shortest simulated step for INSTANCE."""
    from .optimizer import solve as solve_instance
    from .optimizer.refine import DEFAULT_THREADS
    from .optimizer.summary import summary_text
    from .validation.physical_floor import physical_floor

    _distinct_outputs(("--out", out_path), instance_path)
    instance = _load_instance(instance_path)
    try:
        result = solve_instance(instance, time_limit_s=time_limit_s, seed=seed, top_k=top_k,
                                threads=threads or DEFAULT_THREADS,
                                progress=None if quiet else lambda msg: click.echo(msg, err=True))
    except (InfeasibleError, NoPlanInTimeError) as err:
        if as_json:  # a pipeline reading stdout gets the status too
            status = "infeasible" if isinstance(err, InfeasibleError) else "no_plan_in_time"
            click.echo(json.dumps({"status": status, "reason": err.reason}, indent=2))
        raise
    floor = physical_floor(instance, result.plan)
    if result.step_time_s < floor.seconds * (1 - 1e-9):  # a bug in the cost model or simulator: write nothing
        _fail([f"internal error: plan {result.step_time_s:.4f} s is below the physical floor {floor.seconds:.4f} s "
               f"(binding: {floor.binding.resource})"], EXIT_INTERNAL)
    _emit(result.to_json(), as_json, summary_text(instance, result))  # printed first: a failed write loses nothing
    if out_path:
        _write_atomic(out_path, json.dumps(result.plan.model_dump(mode="json"), indent=2) + "\n")
        click.echo(f"plan written to {out_path}", err=True)
    if result.status == "interrupted":
        _fail(["interrupted: the best plan found so far is above"], EXIT_INTERRUPTED)


def _method_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    """``--methods a,b,…`` as a list of known method names (usage error, exit 2, for an unknown one)."""
    if value is None:
        return None
    from .compare import method_names

    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in method_names()]
    if unknown or not names:
        raise click.BadParameter(f"unknown method(s) {', '.join(unknown) or '(none given)'}; known: "
                                 f"{', '.join(method_names())}", ctx, param)
    return names


@main.command()
@_instance_arg
@click.option("--methods", callback=_method_list,
              help="Comma-separated methods (default: all; production always runs as the reference): "
                   "planner, production, crossdc-sota, one-at-a-time, random, annealing, exhaustive.")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT_S, default=60.0, show_default=True,
              callback=_finite_time_limit, help="Wall-clock budget in seconds of the planner and of each search.")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="Random seed of the planner and of the random searches.")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="The planner's CP-SAT workers per round (default 4).")
@_json_opt
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), callback=_writable_path,
              help="Write a PNG of stacked step-time breakdown bars per method here.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@handle_errors
def compare(instance_path: Path, methods: list[str] | None, time_limit_s: float, seed: int, threads: int | None,
            as_json: bool, plot_path: Path | None, quiet: bool) -> None:
    """Compare the planner with the baselines on INSTANCE (same simulator, equal wall time)."""
    from .compare import breakdown_figure, compare_text, save_png
    from .compare import compare as compare_methods
    from .optimizer.refine import DEFAULT_THREADS

    _distinct_outputs(("--plot", plot_path), instance_path)
    instance = _load_instance(instance_path)
    try:
        rows = compare_methods(instance, methods=methods, time_limit_s=time_limit_s, seed=seed,
                               threads=threads or DEFAULT_THREADS,
                               progress=None if quiet else lambda msg: click.echo(msg, err=True))
    except InfeasibleError as err:
        if as_json:  # a pipeline reading stdout gets the status too, as from solve
            click.echo(json.dumps({"status": "infeasible", "reason": err.reason}, indent=2))
        raise
    click.echo(json.dumps([row.to_json() for row in rows], indent=2) if as_json else compare_text(instance, rows))
    if plot_path:
        try:
            save_png(breakdown_figure(rows, instance.name or instance_path.stem), plot_path)
        except OSError as err:
            _cannot_write(plot_path, err)
        click.echo(f"plot written to {plot_path}", err=True)


from .capacity.commands import requirement, sweep  # noqa: E402  (they import this module's helpers)

main.add_command(sweep)
main.add_command(requirement)
