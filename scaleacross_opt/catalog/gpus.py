"""GPU catalog: dense tensor-core peaks, HBM, NVLink and NIC per GPU, from vendor datasheets.

Peaks are dense (no 2:4 sparsity). HBM GiB is the usable capacity the driver reports where known.
"""

from __future__ import annotations

from ..spec.gpu import GpuSpec

_A100_SRC = "NVIDIA A100 Tensor Core GPU datasheet (2021); DGX A100: 8x HDR 200 Gb/s NICs, NVLink3 600 GB/s bidir"
_H100_SRC = (
    "NVIDIA H100 datasheet (SXM5): 989 TF bf16 / 1979 TF fp8 dense, 3.35 TB/s; NVLink4 900 GB/s bidir; "
    "DGX H100 8x400G"
)

GPUS: dict[str, GpuSpec] = {
    gpu.name: gpu
    for gpu in (
        GpuSpec(
            name="A100-40GB", peak_bf16_tflops=312, peak_fp8_tflops=312, hbm_gib=40,
            hbm_bandwidth_gb_per_s=1555, nvlink_bandwidth_gb_per_s=300, nvlink_domain_size=8,
            nic_bandwidth_gbps=200, source=_A100_SRC + "; no FP8 units: fp8 runs at the bf16 rate",
        ),
        GpuSpec(
            name="A100-80GB", peak_bf16_tflops=312, peak_fp8_tflops=312, hbm_gib=80,
            hbm_bandwidth_gb_per_s=2039, nvlink_bandwidth_gb_per_s=300, nvlink_domain_size=8,
            nic_bandwidth_gbps=200, source=_A100_SRC + "; no FP8 units: fp8 runs at the bf16 rate",
        ),
        GpuSpec(
            name="H100-SXM-80GB", peak_bf16_tflops=989, peak_fp8_tflops=1979, hbm_gib=80,
            hbm_bandwidth_gb_per_s=3350, nvlink_bandwidth_gb_per_s=450, nvlink_domain_size=8,
            nic_bandwidth_gbps=400, source=_H100_SRC,
        ),
        GpuSpec(
            name="H800", peak_bf16_tflops=989, peak_fp8_tflops=1979, hbm_gib=80,
            hbm_bandwidth_gb_per_s=3350, nvlink_bandwidth_gb_per_s=200, nvlink_domain_size=8,
            nic_bandwidth_gbps=400,
            source=(
                "H800 SXM: H100 compute with NVLink cut to 400 GB/s bidir "
                "(DeepSeek-V3 report, arXiv 2412.19437 §3.1)"
            ),
        ),
        GpuSpec(
            name="H200-SXM-141GB", peak_bf16_tflops=989, peak_fp8_tflops=1979, hbm_gib=139.8,
            hbm_bandwidth_gb_per_s=4800, nvlink_bandwidth_gb_per_s=450, nvlink_domain_size=8,
            nic_bandwidth_gbps=400,
            source=(
                "NVIDIA H200 datasheet (141 GB HBM3e, 4.8 TB/s); "
                "139.8 GiB usable per shared/calibration/h200/meta.csv"
            ),
        ),
        GpuSpec(
            name="B200", peak_bf16_tflops=2250, peak_fp8_tflops=4500, hbm_gib=180,
            hbm_bandwidth_gb_per_s=8000, nvlink_bandwidth_gb_per_s=900, nvlink_domain_size=8,
            nic_bandwidth_gbps=400,
            source=(
                "NVIDIA HGX B200 datasheet (8 GPUs: 18 PF bf16 / 36 PF fp8 dense, 1.44 TB HBM3e, "
                "NVLink5 1.8 TB/s bidir); ConnectX-7 400G"
            ),
        ),
        GpuSpec(
            name="GB200-NVL72", peak_bf16_tflops=2500, peak_fp8_tflops=5000, hbm_gib=186,
            hbm_bandwidth_gb_per_s=8000, nvlink_bandwidth_gb_per_s=900, nvlink_domain_size=72,
            nic_bandwidth_gbps=800,
            source=(
                "NVIDIA GB200 NVL72 datasheet (72 GPUs: 180 PF bf16 / 360 PF fp8 dense, 13.4 TB HBM3e); "
                "ConnectX-8 800G"
            ),
        ),
    )
}


def gpu_by_name(name: str) -> GpuSpec:
    """The catalog GPU called ``name``; KeyError lists the known names."""
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}") from None
