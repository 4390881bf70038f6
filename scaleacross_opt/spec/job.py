"""The training job: which model, how long the sequences, how big the batch."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from . import bounds as B
from .base import StrictModel
from .model import ModelSpec


class Precision(StrEnum):
    """Matmul precision of the training run (master weights and optimizer stay FP32)."""

    BF16 = "bf16"
    FP8 = "fp8"


class Job(StrictModel):
    """One training job."""

    model: ModelSpec | str = Field(description="Name of a file in `models/` (without .yaml) or an inline model.")
    seq_len: int = Field(ge=1, le=B.MAX_SEQ_LEN, description="Tokens per sequence (≤ 2^20 = 1,048,576).")
    global_batch_size: int = Field(
        ge=1, le=B.MAX_GLOBAL_BATCH_SIZE, description="Sequences per optimizer step (≤ 2^24 = 16,777,216)."
    )
    precision: Precision = Field(default=Precision.BF16, description="Matmul precision: bf16 or fp8.")
    num_gpus: int | None = Field(
        default=None, ge=1, le=B.MAX_GPUS, description="GPUs the job uses (≤ 2^24); default: all in the cluster."
    )

    @property
    def model_spec(self) -> ModelSpec:
        """The resolved model (the loader replaces names by specs)."""
        if isinstance(self.model, str):
            raise ValueError(f"model {self.model!r} is not resolved; load the instance with load_instance()")
        return self.model

    @property
    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step."""
        return self.seq_len * self.global_batch_size
