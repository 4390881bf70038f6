"""A training plan: parallel degrees, schedule, placement onto buildings, network settings.

Grid convention: a model replica is tp·cp·pp GPUs (EP reuses the dp·cp ranks of MoE layers);
dp replicas make up the job. The placement says which of pp / dp is split across buildings.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field

from . import bounds as B
from .base import StrictModel
from .network import NetworkConfig


def _registered_schedule(name: str) -> str:
    """A pipeline schedule name the registry knows (schedules are modules, so not a Python enum; the JSON
    Schema lists them, see ``schema_export``)."""
    from ..schedules import schedule_names

    if name not in schedule_names():
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(schedule_names())}")
    return name


ScheduleName = Annotated[str, AfterValidator(_registered_schedule)]


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    NONE = "none"
    SELECTIVE = "selective"  # recompute attention core (softmax/dropout) only
    FULL = "full"  # keep layer inputs only, recompute the whole forward in backward


class CrossBuilding(StrEnum):
    """Which parallel dimension is split across building boundaries (TP, CP and EP never are)."""

    NONE = "none"  # everything inside one building
    PP = "pp"  # each pipeline spans buildings; every building holds some stages of every replica
    DP = "dp"  # each replica inside one building; buildings hold different replicas
    PP_DP = "pp+dp"  # buildings form groups; pipelines span the buildings of a group


class DpSync(StrEnum):
    """When a stage's data-parallel gradient sync starts."""

    # Bucketed: buckets reduce while the stage's last backward still runs (PyTorch DDP, Megatron-Core
    # --overlap-grad-reduce, FSDP). Slower than AFTER_BACKWARD only where the extra buckets' latency outlasts
    # the backward they hide behind (the bucket size rule keeps them large), so the optimizer uses it.
    OVERLAP_BACKWARD = "overlap-backward"
    # One sync after the stage's last backward (Megatron-LM before --overlap-grad-reduce, Sept 2023).
    AFTER_BACKWARD = "after-backward"


class BuildingShare(StrictModel):
    """The part of the GPU grid one building holds: ``pp_stages`` consecutive stages of ``dp_replicas``."""

    building: str = Field(min_length=1, description="Building name.")
    group: int = Field(
        default=0, ge=0, le=B.MAX_BUILDING_GROUP,
        description="Pipeline group (pp+dp only): buildings of one group chain their stages in list order.",
    )
    dp_replicas: int = Field(
        ge=1, le=B.MAX_DEGREE, description="Data-parallel replicas (or replicas' stages) held here (≤ 2^24)."
    )
    pp_stages: int = Field(
        ge=1, le=B.MAX_DEGREE, description="Consecutive pipeline stages of each of those replicas held here (≤ 2^24)."
    )


class Placement(StrictModel):
    """How the tp×cp×pp×dp grid maps onto buildings, and how layers map onto stages."""

    cross_building: CrossBuilding = Field(description="Dimension split across buildings.")
    buildings: list[BuildingShare] = Field(min_length=1, description="Share of the grid per building.")
    layers_per_stage: list[Annotated[int, Field(ge=0, le=B.MAX_LAYERS)]] | None = Field(
        default=None, min_length=1,
        description="Transformer layers held by each pipeline stage (length pp, sum = layers; each 0..1024); "
                    "default: the even split (extras to the middle stages).",
    )


class Plan(StrictModel):
    """A complete plan. ``placement`` and ``network`` may be omitted: defaults are filled in."""

    tp: int = Field(
        ge=1, le=B.MAX_DEGREE, description="Tensor-parallel degree (with sequence parallelism), inside NVLink (≤ 2^24)."
    )
    cp: int = Field(
        default=1, ge=1, le=B.MAX_DEGREE,
        description="Context-parallel degree (sequence split, ring attention; ≤ 2^24).",
    )
    pp: int = Field(ge=1, le=B.MAX_DEGREE, description="Pipeline-parallel degree (stages; ≤ 2^24).")
    dp: int = Field(ge=1, le=B.MAX_DEGREE, description="Data-parallel degree (replicas; ≤ 2^24).")
    ep: int = Field(
        default=1, ge=1, le=B.MAX_DEGREE, description="Expert-parallel degree for MoE layers; divides dp·cp (≤ 2^24)."
    )
    virtual_stages: int = Field(
        default=1, ge=1, le=B.MAX_VIRTUAL_STAGES, description="Model chunks per pipeline stage (interleaving; ≤ 1024)."
    )
    micro_batch_size: int = Field(
        ge=1, le=B.MAX_MICRO_BATCH_SIZE, description="Sequences per micro-batch (≤ 2^24)."
    )
    schedule: ScheduleName = Field(description="Pipeline schedule name (see `scaleacross-opt list schedules`).")
    recompute: Recompute = Field(default=Recompute.NONE, description="Activation recomputation mode.")
    zero_stage: int = Field(default=1, ge=0, le=3, description="ZeRO stage: 0 none, 1 optimizer, 2 +grads, 3 +weights.")
    dp_sync: DpSync = Field(
        default=DpSync.OVERLAP_BACKWARD, description="Whether DP gradient sync overlaps the last backward."
    )
    dp_bucket_params: int | None = Field(
        default=None, ge=1, le=B.MAX_BUCKET_PARAMS,
        description=(
            "Gradient bucket size of the DP sync overlapping the backward, in parameters (Megatron-Core "
            "--ddp-bucket-size; each bucket is one collective paying its own latency; ≤ 2^40). None: "
            "Megatron-Core's default max(40M, 1M·dp·cp). The search tries the multiples of it in "
            "search.dp_bucket_factors."
        ),
    )
    tp_comm_overlap: bool = Field(
        default=False,
        description=(
            "Overlap TP (sequence-parallel) all-gathers/reduce-scatters with the GEMMs they feed or follow "
            "(Transformer Engine userbuffers; NeMo/Megatron-Core tp_comm_overlap). False: TP collectives "
            "are exposed (Megatron-LM 2021/2022, default torchtitan)."
        ),
    )
    placement: Placement | None = Field(default=None, description="Mapping onto buildings; default filled in.")
    network: NetworkConfig | None = Field(default=None, description="Network settings; default from the catalog.")

    @property
    def num_gpus(self) -> int:
        """GPUs the plan occupies."""
        return self.tp * self.cp * self.pp * self.dp

    def num_microbatches(self, global_batch_size: int) -> int:
        """Micro-batches per replica per step (global batch ÷ (dp · micro-batch size))."""
        return global_batch_size // (self.dp * self.micro_batch_size)
