import time

import pytest
import torch

from trainready import device as dev
from trainready.config import ConfigError
from trainready.core.store import Store
from trainready.device import DeviceError

# Tests that assert what this machine lacks; everything else holds on any machine.
cpu_only = pytest.mark.skipif(
    torch.accelerator.is_available(), reason="asserts a machine without accelerators"
)


@cpu_only
def test_available_devices_is_cpu_only_here():
    assert dev.available_devices() == ["cpu"]


@cpu_only
def test_resolve():
    assert dev.resolve("auto") == "cpu"
    assert dev.resolve("cpu") == "cpu"
    assert dev.resolve(" CPU:0 ") == "cpu"


@cpu_only
def test_resolve_unavailable_backend_names_what_is_available():
    with pytest.raises(DeviceError) as e:
        dev.resolve("cuda")
    assert str(e.value) == "device 'cuda:0' is not available on this machine; available: cpu"
    with pytest.raises(DeviceError, match="available: cpu"):
        dev.resolve("cpu:1")
    assert isinstance(e.value, ConfigError)


@cpu_only
@pytest.mark.parametrize("spec", ["foo", "cuda:x", "cuda:-1", ""])
def test_resolve_unknown_names_valid_choices(spec):
    with pytest.raises(DeviceError) as e:
        dev.resolve(spec)
    assert str(e.value) == f"unknown device {spec!r}; valid: cpu, auto"


def test_device_type():
    assert dev.device_type("cpu") == "cpu"
    assert dev.device_type("cuda:1") == "cuda"


def test_torch_dtype():
    assert dev.torch_dtype("bf16") is torch.bfloat16
    assert dev.torch_dtype("fp64") is torch.float64
    with pytest.raises(ConfigError, match="unknown dtype 'int8'; valid: fp32, bf16, fp16, fp64"):
        dev.torch_dtype("int8")


def test_timer_measures_a_sleep():
    timer = dev.Timer("cpu")
    assert timer.clock == "wall"
    timer.start()
    time.sleep(0.05)
    elapsed = timer.stop()
    assert 0.045 <= elapsed < 0.15
    with pytest.raises(RuntimeError, match="before start"):
        timer.stop()


def test_memory_stats_on_cpu_follow_the_process():
    before = dev.memory_stats("cpu")
    assert before["source"] == "process-rss"
    assert 0 < before["allocated"] <= before["peak_allocated"] < before["total"]
    big = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    after = dev.memory_stats("cpu")
    assert after["allocated"] >= before["allocated"] + 32 * 2**20
    assert after["peak_allocated"] >= after["allocated"]
    del big


def test_reset_peak_memory_on_cpu():
    big = torch.ones(64 * 2**20 // 4)  # raises the peak, then gives the pages back
    del big
    peak = dev.memory_stats("cpu")["peak_allocated"]
    if not dev.reset_peak_memory("cpu"):
        pytest.skip("this kernel cannot reset the peak RSS")
    assert dev.memory_stats("cpu")["peak_allocated"] <= peak - 32 * 2**20


def test_flush_cache_reuses_one_buffer():
    dev.flush_cache("cpu")
    buf = dev._flush_buffers["cpu"]
    assert buf.numel() * buf.element_size() >= 64 * 2**20
    dev.flush_cache("cpu")
    assert dev._flush_buffers["cpu"] is buf


def test_device_info_and_key_on_cpu():
    info = dev.device_info("cpu")
    assert info["type"] == "cpu" and info["name"]
    assert info["threads"] == torch.get_num_threads()
    assert info["runtime"]["torch"] == torch.__version__
    key = dev.device_key("cpu")
    assert key.startswith(f"cpu|{info['name']}|threads={torch.get_num_threads()}|torch=")


def test_device_key_changes_with_thread_count():
    threads = torch.get_num_threads()
    key = dev.device_key("cpu")
    try:
        torch.set_num_threads(threads + 1)
        assert dev.device_key("cpu") != key
    finally:
        torch.set_num_threads(threads)


def test_is_oom():
    assert dev.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert dev.is_oom(MemoryError())
    assert dev.is_oom(
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory"
        )
    )
    assert dev.is_oom(RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate"))
    assert not dev.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not dev.is_oom(ValueError("out of memory"))


def test_a_real_cpu_allocation_failure_is_oom():
    with pytest.raises(RuntimeError) as e:
        torch.empty(2**62, dtype=torch.uint8)
    assert dev.is_oom(e.value)


def test_calibrate_peak_on_cpu_is_plausible_and_quick():
    t0 = time.perf_counter()
    c = dev.calibrate_peak("cpu", "fp32", start_n=64, max_n=256, target_s=0.005, repeats=3)
    assert time.perf_counter() - t0 < 5
    # Plausible, not fast: a shared CI core under load still does far more than 1e8 FLOP/s.
    assert 1e8 < c["peak_flops"] < 1e14
    assert c["n"] in (64, 128, 256)
    assert c["clock"] == "wall"
    assert 1 <= len(c["tflops_samples"]) <= 3
    assert c["peak_flops"] == pytest.approx(max(c["tflops_samples"]) * 1e12)


def test_calibrate_peak_respects_its_budget():
    t0 = time.perf_counter()
    c = dev.calibrate_peak("cpu", "fp32", start_n=256, max_n=4096, repeats=1000, budget_s=0.3)
    assert time.perf_counter() - t0 < 2
    assert 1 <= len(c["tflops_samples"]) < 1000


@pytest.fixture
def counted_calibration(monkeypatch):
    """Make calibrations small and count them."""
    calls = []
    real = dev.calibrate_peak

    def small(device, dtype, **kw):
        calls.append((device, dtype))
        return real(device, dtype, start_n=128, max_n=256, target_s=0.002, repeats=2)

    monkeypatch.setattr(dev, "calibrate_peak", small)
    return calls


def test_resolve_peak_on_cpu_measures_once_then_reuses_the_store(tmp_path, counted_calibration):
    with Store(tmp_path) as store:
        first = dev.resolve_peak("cpu", "bf16", store=store)
        assert first["source"] == "measured" and first["kind"] is None
        assert first["flops"] > 0
        assert first["label"] == f"vs measured peak (bf16 matmul calibration, {first['n']}³)"
        second = dev.resolve_peak("cpu", "bf16", store=store)
        assert counted_calibration == [("cpu", "bf16")]
        assert second["flops"] == first["flops"]
        assert second["measured_at"] == first["measured_at"] is not None
        stored = store.get_calibration(dev.device_key("cpu"), "bf16")
        assert stored["peak_flops"] == first["flops"]

        dev.resolve_peak("cpu", "fp32", store=store)  # another dtype is another calibration
        assert counted_calibration == [("cpu", "bf16"), ("cpu", "fp32")]


def test_recalibrate_measures_again_and_replaces_the_cached_peak(tmp_path, counted_calibration):
    with Store(tmp_path) as store:
        key = dev.device_key("cpu")
        store.put_calibration(key, "fp32", 1.0, {"n": 8})  # a peak measured under heavy load
        assert dev.resolve_peak("cpu", "fp32", store=store)["flops"] == 1.0
        fresh = dev.resolve_peak("cpu", "fp32", store=store, recalibrate=True)
        assert counted_calibration == [("cpu", "fp32")] and fresh["flops"] > 1.0
        assert store.get_calibration(key, "fp32")["peak_flops"] == fresh["flops"]


def test_resolve_peak_never_reuses_another_machines_calibration(tmp_path, counted_calibration):
    with Store(tmp_path) as store:
        store.put_calibration("cpu|Some Other CPU|threads=64|torch=2.13.0", "bf16", 9e15, {"n": 1})
        peak = dev.resolve_peak("cpu", "bf16", store=store)
    assert counted_calibration == [("cpu", "bf16")]
    assert peak["flops"] != 9e15


def test_resolve_peak_without_store_measures(counted_calibration):
    peak = dev.resolve_peak("cpu", "fp32")
    assert peak["source"] == "measured" and peak["flops"] > 0
    assert counted_calibration == [("cpu", "fp32")]


def test_resolve_peak_uses_the_table_for_a_known_device(monkeypatch):
    fake = {"type": "cuda", "name": "NVIDIA H200", "total_memory": 141 * 2**30}
    monkeypatch.setattr(dev, "device_info", lambda device: fake)
    monkeypatch.setattr(dev, "calibrate_peak", lambda *a, **k: pytest.fail("must not measure"))
    peak = dev.resolve_peak("cuda:0", "bf16")
    assert peak == {
        "flops": pytest.approx(989.4e12),
        "source": "table",
        "kind": "h200",
        "label": "H200 bf16 dense peak (table)",
    }


def test_resolve_peak_measures_a_dtype_the_table_lacks(monkeypatch):
    # The table has no fp32 figure for a TPU: measure rather than borrow the bf16 one.
    fake = {"type": "xla", "name": "TPU v5 lite", "total_memory": 16 * 2**30}
    calibration = {"peak_flops": 4.2e13, "n": 8192, "tflops_samples": [42.0], "clock": "wall"}
    monkeypatch.setattr(dev, "device_info", lambda device: fake)
    monkeypatch.setattr(dev, "calibrate_peak", lambda device, dtype: calibration)
    peak = dev.resolve_peak("xla:0", "fp32")
    assert peak["source"] == "measured" and peak["kind"] == "tpu-v5e"
    assert peak["flops"] == 4.2e13
    assert peak["label"] == "vs measured peak (fp32 matmul calibration, 8192³)"


def test_resolve_peak_rejects_unknown_dtype():
    with pytest.raises(ConfigError, match="unknown dtype 'fp8'"):
        dev.resolve_peak("cpu", "fp8")
