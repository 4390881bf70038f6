"""GPU hardware description (peaks and capacities; efficiencies live in the catalog)."""

from __future__ import annotations

from pydantic import Field

from .base import StrictModel


class GpuSpec(StrictModel):
    """One accelerator type. Bandwidths are per GPU and per direction."""

    name: str = Field(description="Identifier, e.g. 'H100-SXM-80GB'.", min_length=1)
    peak_bf16_tflops: float = Field(gt=0, description="Dense BF16 tensor-core peak, TFLOP/s.")
    peak_fp8_tflops: float = Field(gt=0, description="Dense FP8 tensor-core peak, TFLOP/s.")
    hbm_gib: float = Field(gt=0, description="HBM capacity, GiB.")
    hbm_bandwidth_gb_per_s: float = Field(gt=0, description="HBM bandwidth, GB/s.")
    nvlink_bandwidth_gb_per_s: float = Field(
        gt=0, description="NVLink bandwidth per GPU per direction, GB/s (scale-up domain)."
    )
    nvlink_domain_size: int = Field(ge=1, description="GPUs in one NVLink (scale-up) domain.")
    nic_bandwidth_gbps: float = Field(gt=0, description="Scale-out NIC bandwidth per GPU, Gb/s.")
    source: str = Field(default="", description="Where the numbers come from.")
