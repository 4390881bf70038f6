"""Semantic checks of models, clusters, jobs and search restrictions (beyond the schema's types)."""

from __future__ import annotations

from collections import Counter

import networkx as nx

from ..spec import Cluster, Instance, ModelSpec, SearchSpace
from ..spec.bounds import MAX_SEQUENCES_PER_GPU, MAX_TOKENS_PER_GPU

Problems = list[tuple[str, str]]


def check_model(model: ModelSpec, prefix: str = "job.model.") -> Problems:
    """Head counts divide, MoE routing is consistent."""
    problems: Problems = []
    if model.num_heads % model.num_kv_heads:
        problems.append((f"{prefix}num_kv_heads",
                         f"num_heads={model.num_heads} is not divisible by num_kv_heads={model.num_kv_heads}"))
    if model.head_dim is None and model.hidden_size % model.num_heads:
        problems.append((f"{prefix}num_heads",
                         f"hidden_size={model.hidden_size} is not divisible by num_heads={model.num_heads}; "
                         "set head_dim explicitly"))
    if model.moe is not None:
        if model.moe.top_k > model.moe.num_experts:
            problems.append((f"{prefix}moe.top_k",
                             f"top_k={model.moe.top_k} exceeds num_experts={model.moe.num_experts}"))
        if model.moe.first_dense_layers >= model.layers:
            problems.append((f"{prefix}moe.first_dense_layers",
                             f"first_dense_layers={model.moe.first_dense_layers} leaves no MoE layer "
                             f"(layers={model.layers})"))
    return problems


def check_cluster(cluster: Cluster) -> Problems:
    """Unique names, links between known distinct buildings, no duplicate links, connectivity."""
    problems: Problems = []
    names = [b.name for b in cluster.buildings]
    for name, count in Counter(names).items():
        if count > 1:
            problems.append(("cluster.buildings", f"building name {name!r} is used {count} times"))
    for i, building in enumerate(cluster.buildings):
        gpu = building.gpu_spec
        if building.num_gpus % building.gpus_per_node:
            problems.append((f"cluster.buildings[{i}].num_gpus",
                             f"num_gpus={building.num_gpus} is not a multiple of "
                             f"gpus_per_node={building.gpus_per_node}"))
        if gpu.nvlink_domain_size % building.gpus_per_node and building.gpus_per_node % gpu.nvlink_domain_size:
            problems.append((f"cluster.buildings[{i}].gpus_per_node",
                             f"gpus_per_node={building.gpus_per_node} and the NVLink domain of {gpu.name} "
                             f"({gpu.nvlink_domain_size}) do not nest"))
    known = set(names)
    seen: set[frozenset[str]] = set()
    for i, link in enumerate(cluster.links):
        for end in ("a", "b"):
            if getattr(link, end) not in known:
                problems.append((f"cluster.links[{i}].{end}",
                                 f"unknown building {getattr(link, end)!r}; known: {', '.join(names)}"))
        if link.a == link.b:
            problems.append((f"cluster.links[{i}].b", f"link connects building {link.a!r} to itself"))
        pair = frozenset((link.a, link.b))
        if pair in seen and link.a != link.b:
            problems.append((f"cluster.links[{i}]", f"duplicate link between {link.a!r} and {link.b!r}"))
        seen.add(pair)
    if not problems and len(names) > 1:
        components = list(nx.connected_components(cluster.graph))
        if len(components) > 1:
            parts = " | ".join(", ".join(sorted(c)) for c in components)
            problems.append(("cluster.links", f"buildings are disconnected: {parts}"))
    return problems


def check_search(search: SearchSpace) -> Problems:
    """Restriction lists are non-empty and positive (schedule names are checked by the schema)."""
    problems: Problems = []
    for field, values in search:
        if values is None:
            continue
        if not values:
            problems.append((f"search.{field}", "empty list: allow at least one value or omit the field"))
        ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if any(v < 1 for v in ints) and field != "zero_stages":
            problems.append((f"search.{field}", f"values must be ≥ 1, got {sorted(ints)}"))
    for field, limit in (("qps_per_connection", 256), ("window_kib_per_qp", 1 << 20)):
        values = getattr(search, field) or []
        if any(v > limit for v in values):
            problems.append((f"search.{field}", f"values must be ≤ {limit} (as in a plan), got {sorted(values)}"))
    if search.zero_stages and any(z not in (0, 1, 2, 3) for z in search.zero_stages):
        problems.append(("search.zero_stages", f"ZeRO stages are 0..3, got {search.zero_stages}"))
    return problems


def check_instance(instance: Instance) -> Problems:
    """All semantic checks of an instance."""
    problems = check_cluster(instance.cluster)
    problems += check_model(instance.job.model_spec)
    problems += check_search(instance.search)
    total = instance.cluster.total_gpus
    if instance.job.num_gpus is not None and instance.job.num_gpus > total:
        problems.append(("job.num_gpus", f"num_gpus={instance.job.num_gpus} exceeds the cluster's {total} GPUs"))
    problems += check_work_per_gpu(instance)
    return problems


def check_work_per_gpu(instance: Instance) -> Problems:
    """One step's sequences and tokens per job GPU are bounded (``spec.bounds``).

    A pipeline schedule holds every micro-batch of a step (up to global_batch_size / dp of them per
    stage), so ``solve``'s memory and time grow with the sequences per GPU: 2^16 of them on 16 GPUs
    take ~0.8 GB, 6 million (a batch of 10^8 on 16 GPUs) exhaust memory. 4,096 sequences per GPU is
    ~500× the shipped instances. Tokens per GPU per step are bounded by 2^27 (~134M): at that size a
    step of even a 1B-parameter model is 8·10^17 FLOP per GPU, > 10 minutes at H100's BF16 peak."""
    job = instance.job
    gpus = min(instance.num_gpus, instance.cluster.total_gpus)
    problems: Problems = []
    if job.global_batch_size > MAX_SEQUENCES_PER_GPU * gpus:
        problems.append(("job.global_batch_size",
                         f"global_batch_size={job.global_batch_size} on {gpus} GPUs is "
                         f"{job.global_batch_size / gpus:,.0f} sequences per GPU per step, above the bound "
                         f"{MAX_SEQUENCES_PER_GPU:,} (at most {MAX_SEQUENCES_PER_GPU * gpus:,} on {gpus} GPUs): "
                         "the pipeline schedule holds every micro-batch of a step, so planning memory grows "
                         "with it; use a smaller batch or more GPUs"))
    tokens = job.global_batch_size * job.seq_len
    if tokens > MAX_TOKENS_PER_GPU * gpus:
        problems.append(("job.seq_len",
                         f"global_batch_size={job.global_batch_size} × seq_len={job.seq_len} = {tokens:,} tokens "
                         f"on {gpus} GPUs is {tokens / gpus:,.0f} tokens per GPU per step, above the bound "
                         f"2^27 = {MAX_TOKENS_PER_GPU:,}: even for a 1B-parameter model a step "
                         "would be > 10 minutes of compute per GPU at H100 peak; "
                         "use shorter sequences, a smaller batch or more GPUs"))
    return problems
