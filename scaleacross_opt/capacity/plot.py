"""Figures (matplotlib, no display needed): a sweep's metrics against each varied parameter, a requirement's
curve. ``compare.save_png`` writes them."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from .store import SweepRecord

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .requirement import Requirement

LABELS = {"step_time_s": "step time (s)", "mfu": "MFU", "speedup_vs_production_pct": "speedup vs production (%)"}
MAX_LABELLED_TICKS = 5
CMAPS = ("Blues", "Oranges", "Greens", "Reds", "Purples", "Greys")  # one per method
MARKERS = {"none": "o", "pp": "s", "dp": "^", "pp+dp": "D"}  # the cross-building dimension of the chosen plan


def _figure(rows: int, cols: int) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(4.2 * cols + 1.0, 2.8 * rows + 0.6), layout="constrained")


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _short(path: str) -> str:
    return path.replace("cluster.", "").replace("job.", "")


def sweep_figure(records: list[SweepRecord]) -> Figure:
    """Step time, MFU (and speedup vs production when compared) against each varied parameter: one line per
    method and combination of the other parameters (a colour per method, lighter to darker along the
    combinations; the legend names the first and last), each point marked by the plan's cross-building
    dimension. Points without a plan are left out."""
    from matplotlib import colormaps
    from matplotlib.ticker import NullFormatter

    paths = list(records[0].params) if records else []
    ok = [r for r in records if r.status == "ok"]
    metrics = [m for m in LABELS if any(getattr(res, m) is not None for r in ok for res in r.results)]
    methods = list(dict.fromkeys(res.method for r in ok for res in r.results))
    fig = _figure(max(1, len(metrics)), max(1, len(paths)))
    axes = fig.subplots(max(1, len(metrics)), max(1, len(paths)), squeeze=False)
    dims_seen: set[str] = set()
    for col, path in enumerate(paths):
        values = list(dict.fromkeys(r.params[path] for r in records))
        numeric = _numeric(values)
        position = {v: (v if numeric else i) for i, v in enumerate(values)}
        combos = list(dict.fromkeys(tuple((p, v) for p, v in r.params.items() if p != path) for r in records))
        lines: dict[tuple[str, int], list[tuple[Any, Any]]] = defaultdict(list)  # (method, combo) -> [(x, result)]
        for record in ok:
            combo = combos.index(tuple((p, v) for p, v in record.params.items() if p != path))
            for result in record.results:
                lines[(result.method, combo)].append((position[record.params[path]], result))
        for row, metric in enumerate(metrics):
            ax = axes[row][col]
            for (method, combo), points in lines.items():
                points = sorted(((x, res) for x, res in points if getattr(res, metric) is not None),
                                key=lambda point: point[0])
                if not points:
                    continue
                shade = 0.45 + 0.55 * combo / max(1, len(combos) - 1)
                color = colormaps[CMAPS[methods.index(method) % len(CMAPS)]](shade)
                named = len(combos) <= 3 or combo in (0, len(combos) - 1)
                others = ", ".join(f"{_short(p)}={v}" for p, v in combos[combo])
                label = (method + (f" ({others})" if others else "")) if named else None
                xs = [x for x, _ in points]
                ys = [getattr(res, metric) for _, res in points]
                ax.plot(xs, ys, label=label, color=color, linewidth=1.2)
                for x, y, (_, res) in zip(xs, ys, points, strict=True):
                    dim = res.cross_building or "none"
                    dims_seen.add(dim)
                    ax.plot([x], [y], linestyle="none", marker=MARKERS.get(dim, "x"), color=color, markersize=5)
            if numeric and values and min(values) > 0 and max(values) / min(values) >= 8:
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())
                if len(values) <= MAX_LABELLED_TICKS:  # few values: label each (log axes label only decades)
                    ax.set_xticks(values, [f"{v:g}" for v in values])
            if not numeric:
                ax.set_xticks(range(len(values)), [str(v) for v in values], rotation=20)
            ax.set_xlabel(_short(path))
            ax.set_ylabel(LABELS[metric])
            ax.grid(True, alpha=0.3)
        if metrics and lines:
            axes[0][col].legend(fontsize="x-small")
    if metrics and paths:
        from matplotlib.lines import Line2D

        dims = sorted(dims_seen)
        handles = [Line2D([], [], linestyle="none", marker=MARKERS.get(d, "x"), color="black") for d in dims]
        labels = [f"{d} across buildings" if d != "none" else "one building" for d in dims]
        fig.legend(handles, labels, loc="outside lower center", ncols=max(1, len(labels)), fontsize="small",
                   title="chosen plan", title_fontsize="small")
    else:
        fig.text(0.5, 0.5, "no point has a plan", ha="center", va="center")
    return fig


def requirement_figure(req: Requirement) -> Figure:
    """The measured step time against the field's value, the target line and the answer."""
    fig = _figure(1, 1)
    ax = fig.subplots()
    curve = sorted(req.curve, key=lambda p: p.value)
    ax.plot([p.value for p in curve], [p.step_time_s for p in curve], marker="o", label="best plan (measured)")
    ax.axhline(req.ideal_step_time_s, color="gray", linestyle=":", label="ideal links")
    ax.axhline(req.target_step_time_s, color="tab:red", linestyle="--", label=f"within {req.within:.0%} of ideal")
    if req.value is not None:
        ax.axvline(req.value, color="tab:green", linestyle="--", label=f"requirement: {req.value:.4g}")
    ax.set_xscale("log")
    ax.set_xlabel(req.field)
    ax.set_ylabel("step time (s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig
