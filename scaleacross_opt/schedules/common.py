"""Helpers shared by the schedule modules: 1F1B-style interleaving, W deferral, V-shape placement."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Op, OpKind


def forwards(microbatches: Sequence[int], chunk: int = 0) -> list[Op]:
    """F ops of ``microbatches`` for one chunk, in order."""
    return [Op(OpKind.F, mb, chunk) for mb in microbatches]


def backwards(microbatches: Sequence[int], chunk: int = 0) -> list[Op]:
    """B ops of ``microbatches`` for one chunk, in order."""
    return [Op(OpKind.B, mb, chunk) for mb in microbatches]


def one_f_one_b(fwd: Sequence[Op], bwd: Sequence[Op], warmup: int, block: int = 1) -> list[Op]:
    """Megatron's 1F1B pattern, generalised to blocks: ``warmup`` forwards, then alternating
    ``block`` forwards and ``block`` backwards while forwards remain, then the remaining backwards.

    block = 1 is 1F1B (steady step i runs F[warmup + i] then B[i]); warmup ≥ len(fwd) degenerates
    to all-F-then-all-B (GPipe). Peak activations held = min(warmup + block, n).
    """
    n = len(fwd)
    done_f = min(warmup, n)
    order = list(fwd[:done_f])
    done_b = 0
    while done_f < n:
        order += fwd[done_f : done_f + block]
        done_f = min(n, done_f + block)
        if done_f < n:
            order += bwd[done_b : done_b + block]
            done_b += block
    return order + list(bwd[done_b:])


def defer_weight_grads(order: Sequence[Op], deferred: int) -> list[Op]:
    """Split every B into B (input grad) + W, keeping the newest ``deferred`` W ops pending (FIFO).

    After each B, the oldest pending W ops are emitted until ``deferred`` remain; the pending ones
    run at the end, filling the cool-down waits. ``deferred`` = 0 gives B, W back to back.
    """
    out: list[Op] = []
    pending: list[Op] = []
    for op in order:
        out.append(op)
        if op.kind is OpKind.B:
            pending.append(Op(OpKind.W, op.microbatch, op.chunk))
            if len(pending) > deferred:
                out.append(pending.pop(0))
    return out + pending


def v_shape_position(pp: int, chunk: int, stage: int) -> int:
    """V-shape placement (ZB-V, DualPipeV): chunk 0 runs stages 0→pp-1, chunk 1 runs pp-1→0."""
    return stage if chunk == 0 else 2 * pp - 1 - stage


def v_shape_check(name: str, pp: int, virtual_stages: int, num_microbatches: int, min_microbatches: int) -> str | None:
    """Shared ``check`` of V-shape schedules: exactly 2 chunks per stage and enough micro-batches."""
    if virtual_stages != 2:
        return f"{name} needs virtual_stages=2 (a V of two chunks per stage), got {virtual_stages}"
    if num_microbatches < min_microbatches:
        return f"{name} needs at least {min_microbatches} micro-batches for pp={pp}, got {num_microbatches}"
    return None


UNIT_OP_TIMES = (1, 1, 1)  # relative F, B, W durations when a schedule assumes T_F = T_B = T_W


def greedy_list_order(
    pp: int, num_microbatches: int, positions: Sequence[Sequence[int]], priority: Sequence[tuple[OpKind, int]],
    max_held: int, op_times: tuple[int, int, int] = UNIT_OP_TIMES,
) -> list[list[Op]]:
    """Op orders from greedy list scheduling with integer op durations ``op_times`` (F, B, W; the same
    for every stage and chunk) and free transfers. Backward is split.

    ``positions[c][s]`` is the layer position of chunk c on stage s. Whenever a stage is idle it runs the
    first (kind, chunk) of ``priority`` whose next micro-batch (in order) has its inputs ready, running
    an F only while it holds fewer than ``max_held`` chunk activations (held from F to W), unless every
    stage is idle with nothing it may run (a stage full of one chunk's activations can need its other
    chunk's forward before any backward; the cap then yields instead of deadlocking). W ops run oldest
    first (chunk ignored in ``priority``). Time jumps from one op end to the next.
    """
    v, m = len(positions), num_microbatches
    last = pp * v - 1
    done: dict[tuple[int, int, int], int] = {}  # (kind, mb, position) -> end time
    orders: list[list[Op]] = [[] for _ in range(pp)]
    next_mb = [[[0] * v for _ in range(2)] for _ in range(pp)]  # [stage][F or B][chunk]
    weights: list[list[Op]] = [[] for _ in range(pp)]
    held = [0] * pp
    busy_until = [0] * pp
    never = 1 << 62
    t = 0
    capped = True  # the held-activation cap applies (lifted for one round when everything stalls)
    while any(len(o) < 3 * m * v for o in orders):
        picked = False
        for s in range(pp):
            if busy_until[s] > t:
                continue
            pick = None
            for kind, c in priority:
                if kind is OpKind.W:
                    pick = weights[s][0] if weights[s] else None
                else:
                    mb, k = next_mb[s][kind][c], positions[c][s]
                    if mb >= m or (kind is OpKind.F and capped and held[s] >= max_held):
                        continue
                    need = (OpKind.F, mb, k - 1) if kind is OpKind.F else (
                        (OpKind.B, mb, k + 1) if k < last else (OpKind.F, mb, k))
                    if (kind is OpKind.F and k == 0) or done.get(need, never) <= t:
                        pick = Op(kind, mb, c)
                if pick is not None:
                    break
            if pick is None:
                continue
            picked = True
            orders[s].append(pick)
            busy_until[s] = done[(pick.kind, pick.microbatch, positions[pick.chunk][s])] = t + op_times[pick.kind]
            if pick.kind is OpKind.W:
                weights[s].pop(0)
                held[s] -= 1
            else:
                next_mb[s][pick.kind][pick.chunk] += 1
                held[s] += pick.kind is OpKind.F
                if pick.kind is OpKind.B:
                    weights[s].append(Op(OpKind.W, pick.microbatch, pick.chunk))
        stalled = not picked and all(end <= t for end in busy_until)
        if stalled and not capped:
            raise ValueError(f"greedy op order deadlocks for pp={pp}, v={v}, m={m}, op times {op_times}")
        capped = not stalled
        if not stalled:
            t = min((end for end in busy_until if end > t), default=t + 1)
    return orders
