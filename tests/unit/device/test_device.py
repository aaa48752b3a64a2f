import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from tests.support.fake_gemm import FakeGemm, SizedGemm
from trainready import device as dev
from trainready.core.config import ConfigError
from trainready.core.store import Store
from trainready.device import DeviceError, PeakCache, identity, runtime
from trainready.device import peak as peak_mod

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
    assert 0.045 <= elapsed < 5.0  # wall time (a process clock would read ~0), in seconds
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
    buf = runtime._flush_buffers["cpu"]
    assert buf.numel() * buf.element_size() >= 64 * 2**20
    dev.flush_cache("cpu")
    assert runtime._flush_buffers["cpu"] is buf


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
    """Make calibrations small and count them: on planted timings (a steady device), so every
    one is confirmed and cached whatever the test machine's load (`tests/unit/device/test_peak.py`
    tests calibrations that are not)."""
    calls = []
    real = dev.calibrate_peak
    monkeypatch.setattr(peak_mod, "_time_matmuls", SizedGemm(rate=1e12))
    monkeypatch.setattr(
        peak_mod, "read_reference", lambda d, t: dev.read_reference(d, t, timed=FakeGemm().timed)
    )

    def small(device, dtype, **kw):
        calls.append((device, dtype))
        return real(device, dtype, start_n=128, max_n=256, target_s=0.002, repeats=2)

    monkeypatch.setattr(peak_mod, "calibrate_peak", small)
    return calls


def _cache(store):
    return PeakCache(store.get_calibration, store.put_calibration)


def test_resolve_peak_on_cpu_measures_once_then_reuses_the_store(tmp_path, counted_calibration):
    with Store(tmp_path) as store:
        first = dev.resolve_peak("cpu", "bf16", _cache(store))
        assert first["source"] == "measured" and first["kind"] is None
        assert first["flops"] > 0
        assert first["label"] == f"vs measured peak (bf16 matmul calibration, {first['n']}³)"
        second = dev.resolve_peak("cpu", "bf16", _cache(store))
        assert counted_calibration == [("cpu", "bf16")]
        assert second["flops"] == first["flops"]
        assert second["measured_at"] == first["measured_at"] is not None
        stored = store.get_calibration(dev.device_key("cpu"), "bf16")
        assert stored["peak_flops"] == first["flops"]

        dev.resolve_peak("cpu", "fp32", _cache(store))  # another dtype is another calibration
        assert counted_calibration == [("cpu", "bf16"), ("cpu", "fp32")]


def test_recalibrate_measures_again_and_replaces_the_cached_peak(tmp_path, counted_calibration):
    with Store(tmp_path) as store:
        key = dev.device_key("cpu")
        store.put_calibration(key, "fp32", 1.0, {"n": 8})  # a peak measured under heavy load
        assert dev.resolve_peak("cpu", "fp32", _cache(store))["flops"] == 1.0
        fresh = dev.resolve_peak("cpu", "fp32", _cache(store), recalibrate=True)
        assert counted_calibration == [("cpu", "fp32")] and fresh["flops"] > 1.0
        assert store.get_calibration(key, "fp32")["peak_flops"] == fresh["flops"]


def test_resolve_peak_never_reuses_another_machines_calibration(tmp_path, counted_calibration):
    with Store(tmp_path) as store:
        store.put_calibration("cpu|Some Other CPU|threads=64|torch=2.13.0", "bf16", 9e15, {"n": 1})
        peak = dev.resolve_peak("cpu", "bf16", _cache(store))
    assert counted_calibration == [("cpu", "bf16")]
    assert peak["flops"] != 9e15


def test_resolve_peak_without_store_measures(counted_calibration):
    peak = dev.resolve_peak("cpu", "fp32")
    assert peak["source"] == "measured" and peak["flops"] > 0
    assert counted_calibration == [("cpu", "fp32")]


def _fake_device_info(monkeypatch, info):
    """device_info as resolve_peak sees it, and device_key (in identity) too."""
    for module in (peak_mod, identity):
        monkeypatch.setattr(module, "device_info", lambda device: info)


def test_resolve_peak_uses_the_table_for_a_known_device(monkeypatch):
    fake = {"type": "cuda", "name": "NVIDIA H200", "total_memory": 141 * 2**30}
    _fake_device_info(monkeypatch, fake)
    monkeypatch.setattr(peak_mod, "calibrate_peak", lambda *a, **k: pytest.fail("must not measure"))
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
    _fake_device_info(monkeypatch, fake)
    monkeypatch.setattr(peak_mod, "calibrate_peak", lambda device, dtype: calibration)
    peak = dev.resolve_peak("xla:0", "fp32")
    assert peak["source"] == "measured" and peak["kind"] == "tpu-v5e"
    assert peak["flops"] == 4.2e13
    assert peak["label"] == "vs measured peak (fp32 matmul calibration, 8192³)"


def test_resolve_peak_rejects_unknown_dtype():
    with pytest.raises(ConfigError, match="unknown dtype 'fp8'"):
        dev.resolve_peak("cpu", "fp8")


# -- devices beyond the cpu, through a fake backend -------------------------------------------------
FAKE_MEMORY = 96 * 2**30


@pytest.fixture(params=["privateuse1", "accelerator"])
def fake_backend(request, monkeypatch):
    """A backend with two devices, found either as a registered PrivateUse1 module (`torch.<name>`,
    as torch_neuronx registers one) or through `torch.accelerator` alone. Returns (device type,
    device name, the label of its peak FLOP/s)."""
    # Whatever this machine really has is hidden, so the test holds on GPU machines too.
    for backend in (torch.cuda, torch.xpu, torch.backends.mps):
        monkeypatch.setattr(backend, "is_available", lambda: False)
    if request.param == "privateuse1":
        dev_type, name, label = "privateuseone", "Trainium2", "TRN2-CORE bf16 dense peak (table)"
        module = SimpleNamespace(
            is_available=lambda: True, device_count=lambda: 2, get_device_name=lambda i=0: name
        )
        monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: dev_type)
        current = None
    else:
        dev_type, name = "hpu", "Gaudi 3"  # not in the peak table: measured
        label = "vs measured peak (bf16 matmul calibration, 4096³)"
        # Only names come from the module: availability and counts from torch.accelerator.
        module = SimpleNamespace(get_device_name=lambda i=0: name)
        current = torch.device(dev_type)
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
        monkeypatch.setattr(torch.accelerator, "device_count", lambda: 2)
    monkeypatch.setattr(torch, dev_type, module, raising=False)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda check_available=False: current
    )
    monkeypatch.setattr(
        torch.accelerator, "get_memory_info", lambda d: (FAKE_MEMORY // 2, FAKE_MEMORY)
    )
    fake_calibration = {"peak_flops": 5e13, "n": 4096, "tflops_samples": [50.0], "clock": "wall"}
    monkeypatch.setattr(peak_mod, "calibrate_peak", lambda device, dtype, **kw: fake_calibration)
    return dev_type, name, label


def test_a_fake_backend_lists_its_two_devices(fake_backend):
    dev_type, name, _ = fake_backend
    assert dev.available_devices() == ["cpu", f"{dev_type}:0", f"{dev_type}:1"]
    assert dev.resolve(dev_type.upper() + ":1") == f"{dev_type}:1"
    with pytest.raises(DeviceError, match=f"available: cpu, {dev_type}:0, {dev_type}:1$"):
        dev.resolve(f"{dev_type}:2")
    info = dev.device_info(f"{dev_type}:1")
    assert info["name"] == name and info["total_memory"] == FAKE_MEMORY


def test_devices_command_lists_a_fake_backend_with_its_peak_source(
    fake_backend, monkeypatch, tmp_path
):
    from typer.testing import CliRunner

    from trainready.cli.app import app

    dev_type, name, label = fake_backend
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    result = CliRunner().invoke(app, ["devices", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for index in (0, 1):
        [row] = [ln for ln in result.output.splitlines() if f" {dev_type}:{index} " in ln]
        assert name in row and "96.0 GiB" in row and label in row


# -- vendor stack: driver and collective library versions -------------------------------------------
def _fake_module(monkeypatch, name, **functions):
    """Install a fake vendor module (pynvml, amdsmi) for `import name`."""
    monkeypatch.setitem(sys.modules, name, SimpleNamespace(**functions))


def _missing_module(monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError


@pytest.fixture
def cuda_build(monkeypatch):
    """torch seen as a CUDA build with a GPU; the test picks NVIDIA or ROCm via torch.version.hip."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    monkeypatch.setattr(torch.version, "hip", None)


def _fake_tool(monkeypatch, answer):
    """Replace vendor command-line tools: `answer(cmd)` gives stdout or raises; calls recorded."""
    calls = []

    def run(cmd, **kw):
        calls.append((list(cmd), kw.get("timeout")))
        return subprocess.CompletedProcess(cmd, 0, stdout=answer(list(cmd)), stderr="")

    monkeypatch.setattr(identity.subprocess, "run", run)
    return calls


def test_nvidia_stack_from_pynvml(cuda_build, monkeypatch):
    shut_down = []
    _fake_module(
        monkeypatch,
        "pynvml",
        nvmlInit=lambda: None,
        nvmlSystemGetDriverVersion=lambda: b"550.54.15",
        nvmlShutdown=lambda: shut_down.append(True),
    )
    calls = _fake_tool(monkeypatch, lambda cmd: pytest.fail("pynvml answered: no tool needed"))
    assert dev.vendor_stack("cuda:0") == {
        "vendor": "nvidia",
        "driver": {"version": "550.54.15", "source": "pynvml"},
        "nccl": {"version": "2.21.5", "source": "torch.cuda.nccl"},
    }
    assert shut_down == [True] and calls == []


def test_nvidia_driver_from_nvidia_smi_without_pynvml(cuda_build, monkeypatch):
    _missing_module(monkeypatch, "pynvml")
    calls = _fake_tool(monkeypatch, lambda cmd: "550.54.15\n550.54.15\n")  # one line per GPU
    assert dev.vendor_stack("cuda:1")["driver"] == {"version": "550.54.15", "source": "nvidia-smi"}
    assert calls == [
        (
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            dev.VENDOR_TOOL_TIMEOUT_S,
        )
    ]


@pytest.mark.parametrize(
    ("failure", "why"),
    [
        (FileNotFoundError(2, "No such file"), "nvidia-smi: not installed"),
        (subprocess.TimeoutExpired("nvidia-smi", 5), "nvidia-smi: no answer within 5 s"),
        (
            subprocess.CalledProcessError(9, "nvidia-smi", stderr="NVIDIA-SMI has failed\n"),
            "nvidia-smi: exit code 9: NVIDIA-SMI has failed",
        ),
    ],
)
def test_unknown_versions_are_null_with_the_reason(cuda_build, monkeypatch, failure, why):
    def broken_init():
        raise RuntimeError("Driver Not Loaded")

    def broken_nccl():
        raise AttributeError("module 'torch._C' has no attribute '_nccl_version'")

    _fake_module(monkeypatch, "pynvml", nvmlInit=broken_init)
    monkeypatch.setattr(torch.cuda.nccl, "version", broken_nccl)

    def tool(cmd):
        raise failure

    _fake_tool(monkeypatch, tool)
    stack = dev.vendor_stack("cuda:0")
    assert stack["driver"] == {
        "version": None,
        "why": f"pynvml: RuntimeError: Driver Not Loaded; {why}",
    }
    assert stack["nccl"]["version"] is None
    assert (
        "AttributeError: module 'torch._C' has no attribute '_nccl_version'" in stack["nccl"]["why"]
    )


def test_nccl_is_null_when_cuda_is_not_available(cuda_build, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dev.vendor_stack("cuda:0")["nccl"] == {
        "version": None,
        "why": "torch.cuda.nccl: CUDA is not available",
    }


@pytest.fixture
def rocm_build(cuda_build, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 20, 5))
    monkeypatch.setattr(
        torch._C, "_show_config", lambda: "  - HIP Runtime 6.2.41134\n  - MIOpen 3.2.0\n"
    )
    (tmp_path / ".info").mkdir()
    (tmp_path / ".info" / "version").write_text("6.2.1-112\n")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    monkeypatch.setattr(identity, "AMDGPU_VERSION_FILE", tmp_path / "no-such-file")


def test_amd_stack_from_amdsmi(rocm_build, monkeypatch):
    _fake_module(
        monkeypatch,
        "amdsmi",
        amdsmi_init=lambda: None,
        amdsmi_get_processor_handles=lambda: ["gpu0"],
        amdsmi_get_gpu_driver_info=lambda handle: {
            "driver_name": "amdgpu",
            "driver_version": "6.8.5",
        },
        amdsmi_shut_down=lambda: None,
    )
    assert dev.vendor_stack("cuda:0") == {
        "vendor": "amd",
        "driver": {"version": "6.8.5", "source": "amdsmi"},
        "nccl": {"version": "2.20.5", "source": "torch.cuda.nccl (RCCL)"},
        "hip_runtime": {"version": "6.2.41134", "source": "torch build config"},
        "rocm": {"version": "6.2.1-112", "source": "ROCM_PATH"},
    }


def test_amd_driver_falls_back_to_sysfs_then_rocm_smi(rocm_build, monkeypatch, tmp_path):
    _missing_module(monkeypatch, "amdsmi")
    _fake_tool(
        monkeypatch,
        lambda cmd: "===== ROCm System Management Interface =====\nDriver version: 6.8.5\n",
    )
    assert dev.vendor_stack("cuda:0")["driver"] == {"version": "6.8.5", "source": "rocm-smi"}
    monkeypatch.setattr(identity, "AMDGPU_VERSION_FILE", tmp_path / "amdgpu-version")
    identity.AMDGPU_VERSION_FILE.write_text("6.10.5\n")
    assert dev.vendor_stack("cuda:0")["driver"] == {"version": "6.10.5", "source": "sysfs"}


def test_intel_driver_from_the_device_properties(monkeypatch):
    props = SimpleNamespace(driver_version="1.6.31294+21")
    monkeypatch.setattr(torch.xpu, "get_device_properties", lambda index: props)
    assert dev.vendor_stack("xpu:0") == {
        "vendor": "intel",
        "driver": {"version": "1.6.31294+21", "source": "torch.xpu device properties"},
    }


@pytest.mark.parametrize(
    ("device", "why"),
    [
        ("cpu", "the cpu has no device driver"),
        ("mps", "trainready reads no driver version for 'mps' devices"),
    ],
)
def test_no_driver_version_elsewhere_says_why(device, why):
    assert dev.vendor_stack(device) == {"vendor": None, "driver": {"version": None, "why": why}}
