"""Pipeline terms of the step bound (``objective``'s docstring has the formulas): the schedules' bubble factors
and cut crossings, the chains of earlier stages' work before a stage can start or end (the LM-head stage, the
last regular stage, a V's tip, the first stage's turn), and the least F and B op of any stage and chunk."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate, pairwise, product

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from ...spec import CrossBuilding
from ..coefficients import Coefficients
from .terms import SCALE, capped_product, layers_if_used, new_var, upper_bound
from .variables import PlanVars


def bubble_factor(schedule_name: str, v: int, pp_values: list[int], m_values: list[int]) -> float:
    """Smallest β = bubble_fraction·m/(pp−1) over the pipelines the schedule accepts (a lower bound)."""
    schedule = get_schedule(schedule_name)
    factors = [schedule.bubble_fraction(pp, v, m) * m / (pp - 1)
               for pp in pp_values if pp > 1 for m in m_values if schedule.check(pp, v, m) is None]
    return max(0.0, min(factors)) if factors else 0.0


def layers_left(pv: PlanVars, name: str, total: int, minus: list[cp_model.IntVar]) -> cp_model.IntVar:
    """max(0, total − head_layers − Σ minus): layers on the stages before a chain's stage."""
    out = pv.model.NewIntVar(0, total, f"layers_{name}")
    pv.model.AddMaxEquality(out, [0, total - pv.head_layers - sum(minus)])
    return out


def pp_mode_literal(pv: PlanVars) -> cp_model.IntVar | None:
    return pv.mode.lit(CrossBuilding.PP) if CrossBuilding.PP in pv.mode.values else None


def fewest_cut_crossings(schedule_name: str, v: int, pp_values: list[int]) -> int:
    """Fewest times one micro-batch's forward pass crosses a cut between stages 0..k−1 and k..pp−1, over the
    depths ``pp_values`` and cuts k: each chunk crosses it once and, where the schedule wraps from the last
    stage back to the first (interleaved: chunk-major layer order), each wrap once more, 2v − 1 in all; a
    V-shaped schedule turns at the last stage, v. The backward pass crosses it as often the other way, so
    each direction of the cut carries this many activations or gradients per micro-batch."""
    schedule = get_schedule(schedule_name)
    counts = []
    for pp in pp_values:
        stage_at = {schedule.chunk_stage(pp, v, c, s): s for c in range(v) for s in range(pp)}
        order = [stage_at[i] for i in range(pp * v)]
        starts = [0] * (pp + 1)  # a step from stage a to b crosses the cuts k with min(a, b) < k ≤ max(a, b)
        for a, b in pairwise(order):
            starts[min(a, b) + 1] += 1
            starts[max(a, b) + 1] -= 1
        counts += list(accumulate(starts))[1:pp]
    return min(counts, default=v)


def microbatch_literals(pv: PlanVars) -> list[tuple[int, cp_model.IntVar]]:
    """(m, "the plan has m micro-batches") for every m of the space."""
    lits = []
    for m in pv.microbatch_values:
        lit = pv.model.NewBoolVar(f"m={m}")
        pv.model.Add(pv.microbatches == m).OnlyEnforceIf(lit)
        pv.model.Add(pv.microbatches != m).OnlyEnforceIf(lit.Not())
        lits.append((m, lit))
    return lits


def at_most_two_used(pv: PlanVars) -> list[cp_model.IntVar] | None:
    """Literals under which at most two buildings are used ([] when the cluster has two; None: one)."""
    used = len(pv.used)
    if used < 2:
        return None
    if used == 2:
        return []
    lit = pv.model.NewBoolVar("used_buildings<=2")
    pv.model.Add(sum(pv.used) <= 2).OnlyEnforceIf(lit)
    pv.model.Add(sum(pv.used) >= 3).OnlyEnforceIf(lit.Not())
    return [lit]


def least_passes_anywhere(pv: PlanVars, passes: list[tuple[cp_model.IntVar, cp_model.IntVar]]
                          ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """A layer's least forward and least full backward (µs) of any kind on any building: the least of
    ``passes`` (per building)."""
    least = []
    for part, kind in enumerate(("forward", "backward")):
        var = new_var(pv.model, f"layer_{kind}_least_anywhere_us")
        pv.model.AddMinEquality(var, [pair[part] for pair in passes])
        least.append(var)
    return least[0], least[1]


@dataclass(frozen=True)
class FirstStage:
    """The pipeline's first stage: ``us[b]`` ≤ its work per micro-batch when building b holds it (its layers at
    b's cheapest layer cost), which it does under any of ``holds[b]`` (conjunctions); it holds at most
    ``most_layers``; ``forward_us`` ≥ any of its forward ops."""

    us: list[cp_model.IntVar]
    holds: list[list[list[cp_model.IntVar]]]
    most_layers: cp_model.IntVar
    forward_us: cp_model.IntVar


def add_first_stage_turn(pv: PlanVars, coeffs: Coefficients, pipeline: cp_model.IntVar, hops: cp_model.IntVar,
                         first: FirstStage, fastest: cp_model.IntVar, less_weight: cp_model.IntVar,
                         v_chunks: dict[int, cp_model.IntVar]) -> None:
    """Stage 0 of a schedule that is not V-shaped runs its ops one after another, and between micro-batch 0's
    forward and backward of its latest chunk it runs only a forwards (``turn_forwards``, each ≤
    ``first.forward_us``), while that micro-batch goes through the last chunk of every later stage and back
    (each ≥ ⌊ℓ_s/v⌋ layers, Σ_{s>0} ℓ_s ≥ L − the most a stage holds, at c_min, less W where the backward is
    split, + the LM head's F and B) over every boundary (hops): T ≥ m·t_0 − a·F_0 + chain + hops. The other
    chains start at the later stages, so a first stage that is the bottleneck had no idle time."""
    model = pv.model
    turns = [(lit, get_schedule(name), v) for (name, v), lit in zip(pv.schedule_chunks.values, pv.schedule_chunks.lits,
                                                                   strict=True)
             if get_schedule(name).head_stage(2, v) != 0]
    if not turns or max(pv.pp.values) < 2:
        return
    total = pv.instance.job.model_spec.layers
    first_us = new_var(model, "first_stage_us")  # stage 0's ops, one micro-batch
    for b in range(len(pv.buildings)):
        for condition in first.holds[b]:
            model.Add(first_us >= first.us[b]).OnlyEnforceIf(condition)
    work = capped_product(model, "m*first_stage_us", pv.microbatches, first_us)
    chain_layers = new_var(model, "turn_chain_layers", total)  # Σ_{s>0} ⌊ℓ_s/v⌋, at least
    for v in {v for _, _, v in turns}:
        model.Add(v * chain_layers >= total - first.most_layers - (v - 1) * (pv.pp_var - 1)).OnlyEnforceIf(v_chunks[v])
    shapes = pv.shape.values
    head = [min(coeffs.head_us[(shape, b)] for b in pv.buildings) for shape in shapes]
    chains = {False: capped_product(model, "turn_chain_layers*c_min", chain_layers, fastest) + pv.shape.linear(head),
              True: capped_product(model, "turn_chain_layers*(c_min-w)", chain_layers, less_weight)
              + pv.shape.linear([max(0, h - coeffs.head_weight_us[s]) for h, s in zip(head, shapes, strict=True)])}
    at_most: dict[int, cp_model.IntVar] = {}  # "m ≤ k" (forced true when it is)
    for (lit, schedule, v), (pp, pp_lit) in product(turns, zip(pv.pp.values, pv.pp.lits, strict=True)):
        allowed = [m for m in pv.microbatch_values if pp > 1 and schedule.check(pp, v, m) is None]
        found = [schedule.turn_forwards(pp, v, m) for m in allowed]
        if not found or None in found:
            continue
        # the most forwards any m up to k may run holds while m ≤ k (a literal per k where that count grows)
        counts = list(accumulate(found, max))
        for i, (m, count) in enumerate(zip(allowed, counts, strict=True)):
            condition = [lit, pp_lit]
            if i + 1 < len(counts):
                if counts[i + 1] == count:
                    continue
                if m not in at_most:
                    at_most[m] = model.NewBoolVar(f"m<={m}")
                    model.Add(pv.microbatches >= m + 1).OnlyEnforceIf(at_most[m].Not())
                condition.append(at_most[m])
            model.Add(pipeline >= work - count * first.forward_us + chains[schedule.splits_backward] + hops
                      ).OnlyEnforceIf(condition)


def layers_cost(pv: PlanVars, name: str, count: cp_model.IntVar, per_layer: list[cp_model.IntVar],
                fastest: cp_model.IntVar, slots: list[cp_model.IntVar]) -> cp_model.IntVar:
    """A lower bound of what ``count`` of the plan's layers cost (µs per micro-batch, the cheapest kind):
    count·c_b with one building b (c_b = c_min when b is the instance's only one); with several, Σ_b x_b·c_b
    over any x_b ≤ the layer slots of building b (stages·layers[b]) with Σ x_b = count — the solver picks the
    cheapest filling, so layers that cannot all fit the fastest building's stages (a mixed-GPU pipeline across
    buildings) are priced where they must run."""
    model = pv.model
    if len(per_layer) == 1:
        return capped_product(model, f"{name}*c", count, per_layer[0])
    total = pv.instance.job.model_spec.layers
    held = []
    for b, (c_b, slots_b) in enumerate(zip(per_layer, slots, strict=True)):
        x_b = model.NewIntVar(0, total, f"{name}_in[{pv.buildings[b]}]")
        model.Add(x_b <= slots_b)
        held.append((x_b, c_b))
    model.Add(sum(x for x, _ in held) == count)
    out = new_var(model, f"{name}_us")
    model.Add(out == sum(capped_product(model, f"{name}*c[{pv.buildings[b]}]", x_b, c_b)
                         for b, (x_b, c_b) in enumerate(held)))
    return out


def v_head_stage_wait(pv: PlanVars,
                      head_stages: list[tuple[cp_model.IntVar, cp_model.IntVar, cp_model.LinearExprT, list]],
                      fastest: cp_model.IntVar, before_head: cp_model.IntVar, hops: cp_model.IntVar,
                      forward_shares: list[tuple[float, float, cp_model.IntVar]],
                      gathered: tuple[cp_model.IntVar, cp_model.IntVar] | None) -> cp_model.IntVar:
    """V-shaped schedules: stage 0 holds the first chunk (n0 = ⌈h/2⌉ of its h layers) and the last (the LM
    head's). Until micro-batch 0's forward has passed every other chunk (≥ L − h/2 layers at the least
    forward share φ_lo of c_min, and every boundary: hops), stage 0 can only run first-chunk forwards (at
    most φ_hi of those layers' time each; φ per recompute mode, over layers: the first chunk holds no LM
    head); everything else it runs after: T ≥ hops + φ_lo·(L − h/2)·c_min
    + m·((h − φ_hi·n0)·c_b + LM head), with h − φ_hi·n0 ≥ h·(1 − φ_hi/2) − φ_hi/2. Under ZeRO-3 each of those
    forwards also waits for its layer's gather, half the pair g (``gathered``: the layers before the LM-head
    stage and g, 0 without ZeRO-3): the chain is ≥ (L − h/2)·g/2 too."""
    model = pv.model
    zero3 = pv.zero.lit(3) if 3 in pv.zero.values else None
    rest = new_var(model, "v_head_stage_after_chain_us")  # per micro-batch: stage 0's work but first-chunk forwards
    head_half = capped_product(model, "head_layers*c_min", pv.head_layers, fastest)
    m_rest = capped_product(model, "m*v_head_stage_after_chain", pv.microbatches, rest)
    wait = new_var(model, "v_head_stage_wait_us")
    if gathered is not None:
        before, pair = gathered
        total = pv.instance.job.model_spec.layers
        units = new_var(model, "v_chain_half_layers", 2 * total)  # 2(L − h) + h = 2·(L − h/2)
        model.Add(units == 2 * before + pv.head_layers)
        chain = capped_product(model, "v_chain_half_layers*gather_pair", units, pair)
        model.Add(4 * wait >= 4 * (hops + m_rest) + chain)
    for least, most, when in forward_shares:  # φ_lo, φ_hi of the plan's recompute mode
        model.Add(2 * SCALE * wait >= 2 * SCALE * (hops + m_rest) + int(SCALE * least) * (2 * before_head + head_half)
                  ).OnlyEnforceIf(when)
        hi = math.ceil(SCALE * most)
        # ZeRO-3's exposed gathers lengthen F at least as much as B: F's share tends to ½ at most
        highs = [(hi, [])] if zero3 is None else [(hi, [zero3.Not()]), (max(hi, SCALE // 2), [zero3])]
        for (t_head, per_layer, head, conditions), (high, zero) in product(head_stages, highs):
            for condition in conditions:
                model.Add(2 * SCALE * rest >= (2 * SCALE - high) * t_head - high * per_layer + 2 * SCALE * head
                          ).OnlyEnforceIf([*condition, *zero, when])
    return wait


def split_backward_chain(pv: PlanVars, coeffs: Coefficients, layers_before_head: cp_model.IntVar,
                         less_weight: cp_model.IntVar, weight: cp_model.IntVar
                         ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """Schedules that split the backward: (the layers before the LM-head stage × ``less_weight`` = max(0, c_min −
    W), a lower bound of their F + B on one micro-batch's chain; the LM-head stage's W per micro-batch, an upper
    bound: head_layers·W_layer + W_head, each at its largest; ``weight``: W_layer)."""
    model = pv.model
    shapes = pv.shape.values
    before = capped_product(model, "layers_before_head*(c-w)", layers_before_head, less_weight)
    head_w = new_var(model, "head_stage_weight_us")
    model.Add(head_w == capped_product(model, "head_layers*w", pv.head_layers, weight)
              + pv.shape.linear([coeffs.head_weight_us[shape] for shape in shapes]))
    return before, head_w


@dataclass(frozen=True)
class VTip:
    """The V's tip stage under PP across: ``chains`` per building b, (b is the last used one, m·t_tip, the layers
    before the tip priced where they run); ``layers``, at least the tip's layers; ``first_chunk_layers``, at
    most its chunk 0's."""

    chains: list[tuple[cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]]
    layers: cp_model.IntVar
    first_chunk_layers: cp_model.IntVar


def inner_buildings_last_stages(pv: PlanVars, products: dict[str, list[cp_model.IntVar]],
                                per_layer: list[cp_model.IntVar], fastest: cp_model.IntVar, head_first: bool
                                ) -> list[cp_model.IntVar]:
    """PP across: building b's last stage is stage K_b = Σ_{b' ≤ b} stages − 1, a regular stage unless it holds
    the LM head (the last used building's last stage; ``head_first``, V-shaped schedules: stage 0); it holds
    ``timed_layers[b]`` or more (placement's trimming bound). The split trims its excess e from the stages
    other than the LM head's, so the stages before K_b hold ≥ Σ_{b' ≤ b} stages·layers − layers[b] − e layers
    (V: with the LM-head stage's own layers in place of its slot). Per building: those layers · c_min; on mixed
    GPUs those layers run in buildings b' ≤ b, so each at most as many as b' has slots, at its own c_b'
    (``layers_cost``: a slow first building's stages before its last are priced at its own speed, not the
    fastest building's: hetero 1F1B pp10 ZeRO-3, 0.78 of its simulated step, 0.95 with them)."""
    model = pv.model
    mixed = len({building.gpu_spec.name for building in pv.instance.cluster.buildings}) > 1
    slots, (excess,) = products["layer_slots"], products["layer_excess"]
    head_correction = pv.head_layers - sum(products["head_slots"]) if head_first else 0
    tag = "v_" if head_first else ""
    out = []
    for b, name in enumerate(pv.buildings):
        before = new_var(model, f"{tag}layers_before_last_stage[{name}]", sum(upper_bound(x) for x in slots[:b + 1]))
        model.AddMaxEquality(before, [0, sum(slots[:b + 1]) - pv.layers[b] - excess + head_correction])
        if not mixed:
            out.append(capped_product(model, f"{tag}layers_before_last_stage*c_min[{name}]", before, fastest))
            continue
        fitting = new_var(model, f"{tag}layers_before_last_stage_in_slots[{name}]", upper_bound(before))
        model.AddMinEquality(fitting, [before, sum(slots[:b + 1])])  # the slots hold them (V: the head's aside)
        out.append(layers_cost(pv, f"{tag}layers_before_last_stage[{name}]", fitting, per_layer[:b + 1], fastest,
                               slots[:b + 1]))
    return out


def v_tip_chains(pv: PlanVars, pp_mode: cp_model.IntVar, stage_time: list[cp_model.IntVar],
                 per_layer: list[cp_model.IntVar], slots: list[cp_model.IntVar], last_used: list[cp_model.IntVar],
                 tip_held: list[cp_model.IntVar]) -> VTip:
    """PP across under a V-shaped schedule (``VTip``). The V's tip is the pipeline's last stage, in the last used
    building (``last_used``), b's last regular stage: it holds ``tip_held[b]`` layers (placement's bound for
    what the split's trimming leaves there, at most ``layers[b]``), which ``stage_time[b]`` prices; its chunk 0
    holds ⌈its layers / 2⌉ ≤ ⌈layers[b] / 2⌉. The stages before the tip hold
    the other L − tip layers, half of each (chunk 0, the first chunk gets the extra layer) on micro-batch 0's
    first forward pass to the tip: Σ_b x_b·c_b over any x_b ≤ b's layer slots (the tip's building: less the
    tip's layers) with Σ x_b = L − tip, so a mixed-GPU pipeline's slower building is priced at its own speed.
    Fewer layers at the tip only lower the bound (m·c_tip ≥ the chain's share of a layer), so ``tip_held`` may
    be a lower bound."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    tip_layers = new_var(model, "v_tip_layers", total)  # lower bounds only: the tip's sync grows with it
    first_chunk = new_var(model, "v_tip_chunk0_layers", total)  # upper bounds only: its W is subtracted
    layers_before = new_var(model, "layers_before_v_tip", total)
    before_in = []
    for b, (name, tail) in enumerate(zip(pv.buildings, last_used, strict=True)):
        model.Add(tip_layers >= tip_held[b]).OnlyEnforceIf(tail)
        model.Add(2 * first_chunk <= pv.layers[b] + 1).OnlyEnforceIf(tail)
        model.Add(layers_before == total - tip_held[b]).OnlyEnforceIf([tail, pp_mode])
        x_b = model.NewIntVar(0, total, f"layers_before_v_tip_in[{name}]")
        model.Add(x_b <= slots[b])
        model.Add(x_b <= slots[b] - tip_held[b]).OnlyEnforceIf(tail)
        before_in.append(x_b)
    model.Add(sum(before_in) == layers_before).OnlyEnforceIf(pp_mode)
    before_cost = new_var(model, "layers_before_v_tip_us")
    model.Add(before_cost == sum(capped_product(model, f"layers_before_v_tip*c[{name}]", x_b, c_b)
                                 for name, x_b, c_b in zip(pv.buildings, before_in, per_layer, strict=True)))
    out = [(tail, capped_product(model, f"m*v_tip_us[{name}]", pv.microbatches, stage_time[b]), before_cost)
           for b, (name, tail) in enumerate(zip(pv.buildings, last_used, strict=True))]
    return VTip(out, tip_layers, first_chunk)


def least_ops(pv: PlanVars, least: tuple[cp_model.IntVar, cp_model.IntVar], pair: cp_model.IntVar | None,
              layer_weight: cp_model.IntVar, unsplit: cp_model.IntVar, first_regular: list[cp_model.IntVar]
              ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """The least F and the least B op of any stage and chunk (µs): ⌊ℓ_min / v⌋ layers (a stage's layers are split
    over its chunks as evenly as possible; ℓ_min the fewest any stage holds: each used building's first regular
    stage, ``first_regular``, or the LM-head stage), each at least the least forward / full backward of one layer
    on any building (``least``), under ZeRO-3 at least half the layer's gather ``pair`` (each pass waits for its
    gather: ``cost.step._chunk_cost``); where the backward is split, B is that less the layer's longest W."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    fewest = new_var(model, "fewest_stage_layers", total)
    model.AddMinEquality(fewest, [*layers_if_used(pv, "first_regular_layers_if_used", total, first_regular),
                                  pv.head_layers])
    chunk = new_var(model, "fewest_chunk_layers", total)
    model.AddDivisionEquality(chunk, fewest, pv.virtual_var)
    per_layer = list(least)
    backward = new_var(model, "least_backward_op_layer_us")
    model.Add(backward >= per_layer[1]).OnlyEnforceIf(unsplit)
    model.Add(backward >= per_layer[1] - layer_weight).OnlyEnforceIf(unsplit.Not())
    if pair is not None:  # B waits for its gather whether or not W runs apart
        forward = new_var(model, "least_forward_op_layer_us")
        model.Add(forward >= per_layer[0])
        model.Add(2 * forward >= pair)
        model.Add(2 * backward >= pair)
        per_layer[0] = forward
    return (capped_product(model, "least_forward_op_us", chunk, per_layer[0]),
            capped_product(model, "least_backward_op_us", chunk, backward))


def most_stage_layers(pv: PlanVars) -> cp_model.IntVar:
    """The most layers any stage holds (pinned): max over the used buildings of ``layers[b]`` (the layer
    split only trims)."""
    most = new_var(pv.model, "most_layers_per_stage", pv.instance.job.model_spec.layers)
    pv.model.AddMaxEquality(most, layers_if_used(pv, "layers_if_used", 0))
    return most


def first_chunk_layers_at_most(pv: PlanVars, v_chunks: dict[int, cp_model.IntVar], v_shape: cp_model.IntVar,
                               most: cp_model.IntVar) -> cp_model.IntVar:
    """⌈ℓ/v⌉ (pinned), ℓ the first stage's layers at most: ``head_layers`` where V-shaped (stage 0 is the LM-head
    stage), else ``most`` (``most_stage_layers``); its first chunk, which holds the embedding, has no more
    layers than that."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    first = new_var(model, "first_stage_layers_at_most", total)
    model.Add(first == pv.head_layers).OnlyEnforceIf(v_shape)
    model.Add(first == most).OnlyEnforceIf(v_shape.Not())
    chunk = new_var(model, "first_chunk_layers_at_most", total)
    for v, v_on in v_chunks.items():
        model.Add(v * chunk >= first).OnlyEnforceIf(v_on)
        model.Add(v * chunk <= first + v - 1).OnlyEnforceIf(v_on)
    return chunk


def first_chunk_op_us(pv: PlanVars, name: str, chunk_layers: cp_model.IntVar, per_layer: cp_model.IntVar,
                      embedding: dict, head: dict) -> cp_model.IntVar:
    """An upper bound (µs, pinned: the objective falls as it grows) of one op of the first stage's first
    chunk: ``chunk_layers``·``per_layer`` + the embedding's (+ the LM head's when pp = 1), per shape."""
    model, shapes = pv.model, pv.shape.values
    out = new_var(model, f"first_chunk_{name}_us")
    layers_part = capped_product(model, f"first_chunk_layers*{name}", chunk_layers, per_layer)
    one_stage = [pv.pp.lit(1)] if 1 in pv.pp.values else []
    for lit in one_stage:
        model.Add(out == layers_part + pv.shape.linear([embedding[s] + head[s] for s in shapes])).OnlyEnforceIf(lit)
    model.Add(out == layers_part + pv.shape.linear([embedding[s] for s in shapes])
              ).OnlyEnforceIf([lit.Not() for lit in one_stage])
    return out
