"""An instance: the cluster, the job and optional restrictions of the search space."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from ..errors import InputError
from . import bounds as B
from .base import StrictModel
from .cluster import Cluster
from .job import Job
from .network import CollectiveAlgorithm, CongestionControl, LoadBalancing, LossRecovery
from .plan import CrossBuilding, Recompute, ScheduleName

# Element types of the search lists: the same bounds as the plan fields they restrict.
Degree = Annotated[int, Field(ge=1, le=B.MAX_DEGREE)]
VirtualStages = Annotated[int, Field(ge=1, le=B.MAX_VIRTUAL_STAGES)]
MicroBatchSize = Annotated[int, Field(ge=1, le=B.MAX_MICRO_BATCH_SIZE)]
ZeroStage = Annotated[int, Field(ge=0, le=3)]
Qps = Annotated[int, Field(ge=1, le=B.MAX_QPS)]
WindowKib = Annotated[int, Field(ge=1, le=B.MAX_WINDOW_KIB)]
BucketFactor = Annotated[int, Field(ge=1, le=B.MAX_BUCKET_FACTOR)]


class SearchSpace(StrictModel):
    """Restrictions of the plan space; an omitted field leaves that choice free."""

    tp_degrees: list[Degree] | None = Field(default=None, description="Allowed TP degrees (each 1..2^24).")
    cp_degrees: list[Degree] | None = Field(default=None, description="Allowed CP degrees (each 1..2^24).")
    pp_degrees: list[Degree] | None = Field(default=None, description="Allowed PP degrees (each 1..2^24).")
    ep_degrees: list[Degree] | None = Field(default=None, description="Allowed EP degrees (each 1..2^24).")
    virtual_stages: list[VirtualStages] | None = Field(
        default=None, description="Allowed model chunks per stage (each 1..1024)."
    )
    micro_batch_sizes: list[MicroBatchSize] | None = Field(
        default=None, description="Allowed micro-batch sizes (each 1..2^24)."
    )
    schedules: list[ScheduleName] | None = Field(default=None, description="Allowed pipeline schedule names.")
    recompute: list[Recompute] | None = Field(default=None, description="Allowed recompute modes.")
    zero_stages: list[ZeroStage] | None = Field(default=None, description="Allowed ZeRO stages (0..3).")
    cross_building: list[CrossBuilding] | None = Field(default=None, description="Allowed cross-building dims.")
    collective_algorithms: list[CollectiveAlgorithm] | None = Field(
        default=None, description="Allowed collective algorithms (both traffic classes)."
    )
    load_balancing: list[LoadBalancing] | None = Field(default=None, description="Allowed load balancing.")
    congestion_control: list[CongestionControl] | None = Field(default=None, description="Allowed congestion control.")
    loss_recovery: list[LossRecovery] | None = Field(default=None, description="Allowed loss recovery.")
    qps_per_connection: list[Qps] | None = Field(default=None, description="Allowed QPs per connection (each 1..256).")
    window_kib_per_qp: list[WindowKib] | None = Field(
        default=None, description="Allowed windows per QP, KiB (each 1..2^20)."
    )
    dp_bucket_factors: list[BucketFactor] | None = Field(
        default=None,
        description="Gradient bucket sizes to try, as multiples of Megatron-Core's default max(40M, 1M·dp·cp) "
        "parameters (each 1..2^20; default [1, 4, 16, 64]; never below the default).",
    )
    tp_comm_overlap: list[bool] | None = Field(
        default=None,
        description="Allowed TP communication overlap settings (default both; the planner overlaps, which the "
        "cost model never rates slower; [false] when the framework lacks it).",
    )


class Instance(StrictModel):
    """A planning problem."""

    name: str = Field(default="", description="Short identifier.")
    description: str = Field(default="", description="What design point the instance represents.")
    cluster: Cluster = Field(description="Buildings and links.")
    job: Job = Field(description="Model, sequence length, batch.")
    search: SearchSpace = Field(default_factory=SearchSpace, description="Restrictions of the search space.")

    @property
    def num_gpus(self) -> int:
        """GPUs the job uses."""
        return self.job.num_gpus or self.cluster.total_gpus

    def with_updates(self, updates: Mapping[str, Any], *, source: str = "<updates>") -> Instance:
        """A new instance with each dotted path of ``updates`` set to its value, validated like a file.

        Paths name fields as an instance file does (``cluster.links[0].bandwidth_gbps``); ``[*]`` sets every
        element of a list (``cluster.links[*].latency_us``). Model and GPU names resolve as in a file (the
        shipped models, the GPU catalog). Raises ``InputError`` with ``source: path: reason`` for each problem.
        """
        from ..capacity.paths import apply_updates
        from ..io import MODELS_DIR, check_loaded_instance, parse_spec, resolve_references

        data = apply_updates(self.model_dump(mode="json"), updates, source)
        data, issues = resolve_references(data, source, MODELS_DIR)
        if issues:
            raise InputError(issues)
        return check_loaded_instance(parse_spec(Instance, data, source), source)
