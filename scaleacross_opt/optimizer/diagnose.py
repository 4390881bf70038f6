"""Why an instance has no feasible plan: the smallest memory shortfall, or the divisibility rule no
degree combination can meet."""

from __future__ import annotations

from ..catalog import coefficients as co
from ..cost.compute import layer_kinds
from ..cost.memory import GIB, embedding_params, layer_params, memory_per_gpu
from ..plan_defaults import fill_defaults
from ..schedules import get_schedule
from ..spec import Instance, Plan
from ..validation.plan_checks import check_plan
from .space import DesignSpace


def infeasibility_reason(instance: Instance, space: DesignSpace) -> str:
    """A one-line explanation of why no plan in ``space`` fits ``instance``."""
    n, gbs = instance.num_gpus, instance.job.global_batch_size
    best: tuple[float, float, Plan] | None = None  # (shortfall GiB, need GiB, plan)
    structural = 0
    for shape in space.shapes:
        for pp in space.pp:
            if n % (shape.tp * shape.cp * pp):
                continue
            dp = n // (shape.tp * shape.cp * pp)
            if gbs % (dp * shape.micro_batch_size):
                continue
            m = gbs // (dp * shape.micro_batch_size)
            for name in space.schedules:
                schedule = get_schedule(name)
                v = min((v for v in space.virtual_stages if schedule.check(pp, v, m) is None), default=None)
                if v is None:
                    continue
                plan = Plan(tp=shape.tp, cp=shape.cp, pp=pp, dp=dp, ep=shape.ep, virtual_stages=v,
                            micro_batch_size=shape.micro_batch_size, schedule=name, recompute=shape.recompute,
                            zero_stage=max(space.zero_stages), tp_comm_overlap=space.tp_comm_overlap)
                if check_plan(plan, instance):
                    continue
                try:
                    plan = fill_defaults(instance, plan)
                except ValueError:
                    continue
                if check_plan(plan, instance):
                    continue
                structural += 1
                memory = memory_per_gpu(instance, plan)
                shortfall = memory.total_gib - memory.capacity_gib
                if best is None or shortfall < best[0]:
                    best = (shortfall, memory.total_gib, plan)
    if best is None:
        return (f"no combination of the allowed degrees (tp {list(space.tp)}, cp {list(space.cp)}, pp ≤ "
                f"{max(space.pp)}) divides {n} GPUs and the global batch {gbs} into a placeable plan")
    shortfall, need, plan = best
    if shortfall <= 0:
        return "no plan satisfies the constraints within the search space (memory fits, but no placement does)"
    return (f"the model does not fit memory anywhere: the most frugal plan (tp={plan.tp} cp={plan.cp} pp={plan.pp} "
            f"dp={plan.dp} mbs={plan.micro_batch_size} {plan.recompute.value} recompute, ZeRO-{plan.zero_stage}, "
            f"{plan.schedule}) needs {need:.1f} GiB per GPU, {shortfall:.1f} GiB more than its GPUs have "
            f"({structural} placeable degree combinations tried)")


def memory_shortfall(instance: Instance) -> str | None:
    """Why no plan can fit, proven from totals alone, or None: the model's weights, gradients and Adam
    states (WEIGHT + GRAD + OPTIMIZER bytes per parameter, each held once when ZeRO-3 shards all of them)
    plus the fixed per-GPU allowance exceed the HBM of every GPU the job may use. Cheap, so ``solve``
    runs it before building the search."""
    model = instance.job.model_spec
    params = sum(sum(vars(layer_params(model, kind, 1, 1)).values()) for kind in layer_kinds(model))
    params += embedding_params(model, 1) * (1 if model.tied_embeddings else 2)
    per_param = co.WEIGHT_BYTES + co.GRAD_BYTES + co.OPTIMIZER_BYTES
    state = params * per_param / GIB
    usable, left = 0.0, instance.num_gpus  # the job may pick the GPUs with the most HBM
    for building in sorted(instance.cluster.buildings, key=lambda b: -b.gpu_spec.hbm_gib):
        take = min(left, building.num_gpus)
        usable += take * (building.gpu_spec.hbm_gib - co.MEMORY_FIXED_OVERHEAD_GIB)
        left -= take
    if state <= usable:
        return None
    return (f"the model does not fit memory anywhere: its weights, gradients and Adam states alone are "
            f"{state / 1024:.1f} TiB ({params / 1e9:.0f}B parameters × {per_param} B), more than the "
            f"{usable / 1024:.1f} TiB of HBM the job's {instance.num_gpus:,} GPUs have after the "
            f"{co.MEMORY_FIXED_OVERHEAD_GIB:g} GiB per-GPU allowance, even fully sharded (ZeRO-3)")
