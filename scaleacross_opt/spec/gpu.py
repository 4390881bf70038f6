"""GPU hardware description (peaks and capacities; efficiencies live in the catalog)."""

from __future__ import annotations

from pydantic import Field

from . import bounds as B
from .base import StrictModel


class GpuSpec(StrictModel):
    """One accelerator type. Bandwidths are per GPU and per direction."""

    name: str = Field(description="Identifier, e.g. 'H100-SXM-80GB'.", min_length=1)
    peak_bf16_tflops: float = Field(gt=0, le=B.MAX_TFLOPS, description="Dense BF16 tensor-core peak, TFLOP/s (≤ 1e6).")
    peak_fp8_tflops: float = Field(gt=0, le=B.MAX_TFLOPS, description="Dense FP8 tensor-core peak, TFLOP/s (≤ 1e6).")
    hbm_gib: float = Field(gt=0, le=B.MAX_HBM_GIB, description="HBM capacity, GiB (≤ 2^20 = 1 PiB).")
    hbm_bandwidth_gb_per_s: float = Field(ge=B.MIN_BANDWIDTH_GBPS, le=B.MAX_GB_PER_S,
                                          description="HBM bandwidth, GB/s (1e-3 … 1e7).")
    nvlink_bandwidth_gb_per_s: float = Field(
        ge=B.MIN_BANDWIDTH_GBPS, le=B.MAX_GB_PER_S,
        description="NVLink bandwidth per GPU per direction, GB/s (scale-up domain; 1e-3 … 1e7)."
    )
    nvlink_domain_size: int = Field(
        ge=1, le=B.MAX_NVLINK_DOMAIN, description="GPUs in one NVLink (scale-up) domain (≤ 2^16)."
    )
    nic_bandwidth_gbps: float = Field(
        ge=B.MIN_BANDWIDTH_GBPS, le=B.MAX_NIC_GBPS, description="Scale-out NIC bandwidth per GPU, Gb/s (≤ 1e7)."
    )
    source: str = Field(default="", description="Where the numbers come from.")
