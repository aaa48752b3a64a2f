import pytest

from trainready.core.config import ConfigError
from trainready.metrics.peaks import KINDS, NAME_PATTERNS, PEAKS, match_kind, peak_flops_for_kind

REQUIRED_KINDS = {
    "a100-sxm",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200",
    "b200",
    "b300",
    "gb200",
    "gb300",
    "mi300x",
    "mi325x",
    "mi355x",
    "trn2-core",
    "trn2-chip",
    "trn3-core",
    "trn3-chip",
    "tpu-v5e",
    "tpu-v5p",
    "tpu-v6e",
    "intel-max-1550",
}
GPU_KINDS = {k for k in PEAKS if not k.startswith(("tpu-", "trn"))}


def test_table_has_the_required_kinds_and_sane_values():
    assert set(PEAKS) >= REQUIRED_KINDS
    assert sorted(PEAKS) == KINDS
    for kind, table in PEAKS.items():
        assert table, kind
        assert set(table) <= {"fp32", "tf32", "bf16", "fp16", "fp8"}, kind
        # Dense per-device peaks of current parts: between 1 TFLOP/s and 20 PFLOP/s.
        assert all(1e12 < v < 2e16 for v in table.values()), kind
    for kind in GPU_KINDS:
        assert "bf16" in PEAKS[kind], kind


def test_known_dense_values():
    assert PEAKS["h100-sxm"]["bf16"] == pytest.approx(989.4e12)
    assert PEAKS["h200"]["bf16"] == pytest.approx(989.4e12)
    assert PEAKS["a100-sxm"]["bf16"] == pytest.approx(312e12)
    assert PEAKS["mi300x"]["bf16"] == pytest.approx(1307.4e12)
    assert PEAKS["b200"]["bf16"] == pytest.approx(2250e12)
    assert PEAKS["tpu-v5e"]["bf16"] == pytest.approx(197e12)
    assert PEAKS["tpu-v6e"]["bf16"] == pytest.approx(918e12)
    assert PEAKS["trn2-chip"]["bf16"] == pytest.approx(667e12)


def test_per_core_trainium_is_a_quarter_chip_at_lnc2():
    for gen in ("trn2", "trn3"):
        for dtype, chip in PEAKS[f"{gen}-chip"].items():
            assert PEAKS[f"{gen}-core"][dtype] == pytest.approx(chip / 4)


def test_low_precision_is_not_slower_than_high_on_tensor_hardware():
    for kind, table in PEAKS.items():
        if "fp8" in table:
            assert table["fp8"] >= table["bf16"], kind
        if "tf32" in table:
            assert table["tf32"] <= table["bf16"], kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB300", "gb300"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("Intel(R) Data Center GPU Max 1550", "intel-max-1550"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v5p", "tpu-v5p"),
        ("TPU v6 lite", "tpu-v6e"),
        ("  nvidia   h200  ", "h200"),
    ],
)
def test_match_kind_known_names(name, kind):
    assert match_kind(name) == kind
    assert kind in PEAKS


@pytest.mark.parametrize(
    "name",
    [
        "",
        "NVIDIA H100",  # form factor unknown: SXM, PCIe and NVL peaks differ
        "NVIDIA H800",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a slice, not the chip
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "AMD Instinct MI300A",
        "AMD Instinct MI250X",
        "NVIDIA GeForce RTX 4090",
        "AMD EPYC 9654 96-Core Processor",
    ],
)
def test_match_kind_never_guesses(name):
    assert match_kind(name) is None


def test_every_pattern_names_a_kind_in_the_table():
    assert {kind for _, kind in NAME_PATTERNS} <= set(PEAKS)


def test_peak_flops_for_kind():
    assert peak_flops_for_kind("h100-sxm", "bf16") == pytest.approx(989.4e12)
    with pytest.raises(ConfigError, match="unknown device kind 'h1000'; valid: a100-pcie, ") as e:
        peak_flops_for_kind("h1000", "bf16")
    assert "\n" not in str(e.value) and "tpu-v6e" in str(e.value)
    with pytest.raises(ConfigError, match="no 'fp8' peak for tpu-v5e; valid: bf16"):
        peak_flops_for_kind("tpu-v5e", "fp8")
