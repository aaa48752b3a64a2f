"""Dense peak FLOP/s of known accelerators, and how a runtime's device name maps to one.

Pure data and lookup: no device APIs here (`trainready.device` asks the runtime for the name).

Every figure is DENSE (no 2:4 structured sparsity), per device as PyTorch sees it, in FLOP/s.
Vendors often print the sparse figure, marked with an asterisk; those are halved here and the
comment says so. "fp32" means what a plain fp32 `torch.matmul` can use by default: on NVIDIA
that is the non-tensor-core FP32 rate (PyTorch keeps TF32 off for matmuls unless asked), on AMD
CDNA it is the FP32 *matrix* rate (rocBLAS/hipBLASLt run fp32 GEMMs on the matrix cores).
"tf32" is the tensor-core TF32 rate, for runs that enable it. "fp8" is dense FP8 (E4M3/E5M2;
MXFP8 or cFP8 where the vendor says so).

A dtype missing from a kind means the vendor publishes no figure for it (or the hardware has no
such path); `trainready.device.resolve_peak` then measures instead of guessing.
"""

from __future__ import annotations

import re

from trainready.core.config import ConfigError

TF = 1e12  # one TFLOP/s

PEAKS: dict[str, dict[str, float]] = {
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/): FP32 19.5 TF,
    # TF32 156 TF, BF16/FP16 312 TF; the asterisked 312/624 figures there are with sparsity.
    "a100-sxm": {"fp32": 19.5 * TF, "tf32": 156 * TF, "bf16": 312 * TF, "fp16": 312 * TF},
    # Same datasheet, PCIe column: identical peaks (the 300 W board sustains lower clocks).
    "a100-pcie": {"fp32": 19.5 * TF, "tf32": 156 * TF, "bf16": 312 * TF, "fp16": 312 * TF},
    # NVIDIA H100 datasheet, SXM column: 67 TF FP32; TF32 989, BF16/FP16 1979, FP8 3958 TF are
    # with sparsity -> halved. Exact dense values from the NVIDIA Hopper architecture whitepaper:
    # FP32 66.9, TF32 494.7, BF16/FP16 989.4, FP8 1978.9 TF.
    "h100-sxm": {
        "fp32": 66.9 * TF,
        "tf32": 494.7 * TF,
        "bf16": 989.4 * TF,
        "fp16": 989.4 * TF,
        "fp8": 1978.9 * TF,
    },
    # NVIDIA H100 datasheet, PCIe column / Hopper whitepaper: FP32 51.2 TF; sparse TF32 756,
    # BF16/FP16 1513, FP8 3026 TF -> dense 378 / 756 / 1513.
    "h100-pcie": {
        "fp32": 51.2 * TF,
        "tf32": 378 * TF,
        "bf16": 756 * TF,
        "fp16": 756 * TF,
        "fp8": 1513 * TF,
    },
    # NVIDIA H100 datasheet, H100 NVL column (per GPU; early 2023 launch material quoted the
    # bridged *pair*): FP32 60 TF; sparse TF32 835, BF16/FP16 1671, FP8 3341 TF -> halved.
    "h100-nvl": {
        "fp32": 60 * TF,
        "tf32": 417.5 * TF,
        "bf16": 835.5 * TF,
        "fp16": 835.5 * TF,
        "fp8": 1670.5 * TF,
    },
    # NVIDIA H200 datasheet, SXM column: same GH100 compute as H100 SXM (FP32 67 TF; sparse TF32
    # 989, BF16/FP16 1979, FP8 3958 TF); only memory changed. Dense values as for h100-sxm.
    "h200": {
        "fp32": 66.9 * TF,
        "tf32": 494.7 * TF,
        "bf16": 989.4 * TF,
        "fp16": 989.4 * TF,
        "fp8": 1978.9 * TF,
    },
    # NVIDIA H200 datasheet, H200 NVL column: FP32 60 TF; sparse TF32 835, BF16/FP16 1671,
    # FP8 3341 TF -> halved.
    "h200-nvl": {
        "fp32": 60 * TF,
        "tf32": 417.5 * TF,
        "bf16": 835.5 * TF,
        "fp16": 835.5 * TF,
        "fp8": 1670.5 * TF,
    },
    # NVIDIA GH200 Grace Hopper Superchip datasheet (GPU part): FP32 67 TF; sparse TF32 989,
    # BF16/FP16 1979, FP8 3958 TF -> same dense values as h100-sxm.
    "gh200": {
        "fp32": 66.9 * TF,
        "tf32": 494.7 * TF,
        "bf16": 989.4 * TF,
        "fp16": 989.4 * TF,
        "fp8": 1978.9 * TF,
    },
    # NVIDIA HGX B200 / DGX B200 datasheets give 8-GPU totals with sparsity: FP8 72 PF,
    # FP16/BF16 36 PF, TF32 18 PF; FP32 600 TF (dense). Per GPU, dense: 4.5 PF FP8, 2.25 PF BF16,
    # 1.125 PF TF32, 75 TF FP32. (NVIDIA's per-GPU table rounds TF32 to 2.2 PF sparse = 1.1 dense.)
    "b200": {
        "fp32": 75 * TF,
        "tf32": 1125 * TF,
        "bf16": 2250 * TF,
        "fp16": 2250 * TF,
        "fp8": 4500 * TF,
    },
    # NVIDIA HGX B300 datasheet, 8-GPU totals: FP8 72 PF, FP16/BF16 36 PF, TF32 18 PF (all with
    # sparsity), FP32 600 TF -> per GPU dense the same as B200 (Blackwell Ultra raised FP4, not
    # BF16). Some third-party pages quote ~3.5 PF dense BF16 for B300; NVIDIA's sheet does not.
    "b300": {
        "fp32": 75 * TF,
        "tf32": 1125 * TF,
        "bf16": 2250 * TF,
        "fp16": 2250 * TF,
        "fp8": 4500 * TF,
    },
    # NVIDIA GB200 NVL72 datasheet, "individual Blackwell GPU" row (1200 W): sparse FP8 10 PF,
    # FP16/BF16 5 PF, TF32 2.5 PF -> halved; FP32 80 TF.
    "gb200": {
        "fp32": 80 * TF,
        "tf32": 1250 * TF,
        "bf16": 2500 * TF,
        "fp16": 2500 * TF,
        "fp8": 5000 * TF,
    },
    # NVIDIA GB300 NVL72 spec, 72-GPU rack with sparsity: FP8 720 PF, FP16/BF16 360 PF, TF32
    # 180 PF -> per GPU dense 5 PF / 2.5 PF / 1.25 PF. No FP32 entry: per-GPU FP32 figures
    # differ between NVIDIA and partner material, so fp32 is measured rather than guessed.
    "gb300": {"tf32": 1250 * TF, "bf16": 2500 * TF, "fp16": 2500 * TF, "fp8": 5000 * TF},
    # AMD Instinct MI300X data sheet (amd.com): FP32 matrix 163.4 TF, TF32 653.7, FP16/BF16
    # 1307.4, FP8 2614.9 TF, all dense (AMD lists sparsity separately at 2x).
    "mi300x": {
        "fp32": 163.4 * TF,
        "tf32": 653.7 * TF,
        "bf16": 1307.4 * TF,
        "fp16": 1307.4 * TF,
        "fp8": 2614.9 * TF,
    },
    # AMD Instinct MI325X data sheet: same CDNA 3 compute as MI300X (more/faster HBM3E only).
    "mi325x": {
        "fp32": 163.4 * TF,
        "tf32": 653.7 * TF,
        "bf16": 1307.4 * TF,
        "fp16": 1307.4 * TF,
        "fp8": 2614.9 * TF,
    },
    # AMD Instinct MI355X data sheet / CDNA 4 whitepaper: FP32 157.3 TF, FP16/BF16 2.5 PF,
    # FP8 5.0 PF dense (5.0 / 10.1 with sparsity). Exact values from 256 CUs x 2.4 GHz x
    # 4096 (BF16) / 8192 (FP8) FLOP/clk/CU. CDNA 4 has no TF32 matrix path (software-emulated
    # via BF16), so no tf32 entry.
    "mi355x": {"fp32": 157.3 * TF, "bf16": 2516.6 * TF, "fp16": 2516.6 * TF, "fp8": 5033.2 * TF},
    # AWS Neuron docs, "Trainium2 Architecture" (awsdocs-neuron.readthedocs-hosted.com): per
    # chip (8 NeuronCore-v3) 1299 FP8, 667 BF16/FP16/TF32, 181 FP32 TFLOPS dense (2563 sparse).
    "trn2-chip": {
        "fp32": 181 * TF,
        "tf32": 667 * TF,
        "bf16": 667 * TF,
        "fp16": 667 * TF,
        "fp8": 1299 * TF,
    },
    # One logical NeuronCore at LNC=2 (the Trn2 default, two physical cores each), which is what
    # one torch "neuron:N" device is: chip / 4. Uncertain to ~5%: the NeuronCore-v3 page quotes
    # 79 BF16 TFLOPS per physical core (158 per logical core), below 667 / 8 = 83.4.
    "trn2-core": {
        "fp32": 181 / 4 * TF,
        "tf32": 667 / 4 * TF,
        "bf16": 667 / 4 * TF,
        "fp16": 667 / 4 * TF,
        "fp8": 1299 / 4 * TF,
    },
    # AWS Neuron docs, "Trainium3 Architecture": per chip (8 NeuronCore-v4) 2517 MXFP8/MXFP4,
    # 671 BF16/FP16/TF32, 183 FP32 TFLOPS dense. The fp8 figure is OCP MXFP8 (microscaled).
    "trn3-chip": {
        "fp32": 183 * TF,
        "tf32": 671 * TF,
        "bf16": 671 * TF,
        "fp16": 671 * TF,
        "fp8": 2517 * TF,
    },
    # One logical NeuronCore at LNC=2 (two physical NeuronCore-v4): chip / 4.
    "trn3-core": {
        "fp32": 183 / 4 * TF,
        "tf32": 671 / 4 * TF,
        "bf16": 671 / 4 * TF,
        "fp16": 671 / 4 * TF,
        "fp8": 2517 / 4 * TF,
    },
    # Google Cloud TPU docs (cloud.google.com/tpu/docs/v5e, /v5p, /v6e): "peak compute per chip
    # (bf16)" 197, 459 and 918 TFLOPs. Google publishes no fp32 or fp8 peak for these chips.
    "tpu-v5e": {"bf16": 197 * TF},
    "tpu-v5p": {"bf16": 459 * TF},
    "tpu-v6e": {"bf16": 918 * TF},
    # Intel Data Center GPU Max 1550 (ark.intel.com product 232873; "52 TF FP64/FP32"). Derived:
    # 128 Xe-cores x 1.6 GHz max clock x per-Xe-core 256 FP32 / 2048 TF32 / 4096 BF16-FP16
    # FLOP/clk (Xe-HPC architecture, Intel Hot Chips 33). Uncertain in practice: XMX clocks under
    # sustained load sit well below 1.6 GHz, so MFU against these figures reads low.
    "intel-max-1550": {
        "fp32": 52.4 * TF,
        "tf32": 419.4 * TF,
        "bf16": 838.9 * TF,
        "fp16": 838.9 * TF,
    },
}

KINDS: list[str] = sorted(PEAKS)

# What one device of a kind is, i.e. what `trainready mfu --devices` counts: (one, many). A
# Trainium "-core" kind is one logical NeuronCore at LNC=2, what one torch "neuron:N" device
# is (4 per chip: a trn2.48xlarge's 16 chips are 64 of them); a "-chip" kind is the whole chip.
_LOGICAL_CORE = (
    "logical NeuronCore (LNC=2, 4 per chip)",
    "logical NeuronCores (LNC=2, 4 per chip)",
)


def device_unit(kind: str, count: int = 1) -> str:
    """What `count` devices of `kind` are called: 'GPU', '8 GPUs' style nouns ('chips',
    'logical NeuronCores (LNC=2, 4 per chip)'), singular for a count of 1."""
    if kind.startswith("trn") and kind.endswith("-core"):
        one, many = _LOGICAL_CORE
    elif kind.endswith("-chip") or kind.startswith("tpu"):
        one, many = "chip", "chips"
    else:
        one, many = "GPU", "GPUs"
    return one if count == 1 else many


# Runtime device name -> kind, first match wins (case-insensitive `re.search`), so the more
# specific pattern of a family comes first. Names are what the runtime reports, e.g.
# torch.cuda.get_device_name(): "NVIDIA H100 80GB HBM3" is the SXM part ("HBM3" board; PCIe
# and NVL say so), "NVIDIA GH200 480GB" must not hit H200, "AMD Instinct MI300A" (an APU with
# fewer CUs) must not hit MI300X. A name that matches nothing is unknown: no guessing.
NAME_PATTERNS: list[tuple[str, str]] = [
    (r"\bA100\b.*\bSXM", "a100-sxm"),
    (r"\bA100\b.*\bPCIE\b", "a100-pcie"),
    (r"\bH100\b.*\bNVL\b", "h100-nvl"),
    (r"\bH100\b.*\bPCIE\b", "h100-pcie"),
    (r"\bH100\b.*(\bSXM|\bHBM3\b)", "h100-sxm"),
    (r"\bGH200\b", "gh200"),
    (r"\bH200\b.*\bNVL\b", "h200-nvl"),
    (r"\bH200\b", "h200"),
    (r"\bGB200\b", "gb200"),
    (r"\bB200\b", "b200"),
    (r"\bGB300\b", "gb300"),
    (r"\bB300\b", "b300"),
    (r"\bMI300X\b", "mi300x"),
    (r"\bMI325X\b", "mi325x"),
    (r"\bMI355X\b", "mi355x"),
    # A torch device on Neuron is one logical NeuronCore, hence the per-core kinds.
    (r"\b(trainium ?2|trn2)\b", "trn2-core"),
    (r"\b(trainium ?3|trn3)\b", "trn3-core"),
    # JAX/PJRT device kinds: "TPU v5 lite" is v5e, "TPU v5" is v5p, "TPU v6 lite" is v6e.
    (r"\bTPU v5( lite|e)\b", "tpu-v5e"),
    (r"\bTPU v5p?$", "tpu-v5p"),
    (r"\bTPU v6( lite|e)\b", "tpu-v6e"),
    (r"\bData Center GPU Max 1550\b", "intel-max-1550"),
]
_COMPILED = [(re.compile(p, re.IGNORECASE), kind) for p, kind in NAME_PATTERNS]

# A MIG slice or vGPU profile has a fraction of the chip: its name contains the chip's name, but
# the chip's peak would be wrong, so it is never matched.
_PARTITION = re.compile(r"\bMIG\b|\b\d+g\.\d+gb\b", re.IGNORECASE)


def match_kind(device_name: str) -> str | None:
    """The peak-table kind for a runtime device name, or None when the name is not known."""
    name = " ".join(device_name.split())
    if not name or _PARTITION.search(name):
        return None
    for pattern, kind in _COMPILED:
        if pattern.search(name):
            return kind
    return None


def peak_flops_for_kind(kind: str, dtype: str) -> float:
    """Dense peak FLOP/s of `kind` at `dtype`; ConfigError naming the valid choices otherwise."""
    if kind not in PEAKS:
        raise ConfigError(f"unknown device kind {kind!r}; valid: {', '.join(KINDS)}")
    table = PEAKS[kind]
    if dtype not in table:
        raise ConfigError(f"no {dtype!r} peak for {kind}; valid: {', '.join(table)}")
    return table[dtype]
