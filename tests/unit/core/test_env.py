import platform
import re
import subprocess
import sys

import pytest
import torch

from tests.support import paths
from trainready import device
from trainready.core import env
from trainready.core.env import git_sha, relevant_env_vars, snapshot

ROOT = paths.ROOT


def test_snapshot_records_versions_and_device(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/x")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("UNRELATED_VAR", "1")
    snap = snapshot("cpu")
    assert snap["torch"] and snap["python"] and snap["packages"]["torch"]
    assert snap["device"]["type"] == "cpu"
    assert snap["env_vars"]["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/x"
    assert "UNRELATED_VAR" not in snap["env_vars"]


def test_snapshot_records_the_command_os_and_device_properties(monkeypatch):
    argv = ["trainready", "run", "matmul", "--filter", "matmul/Qwen3-8B/*", "--out", "my runs"]
    monkeypatch.setattr(sys, "argv", argv)
    snap = snapshot("cpu")
    # Quoted as a shell needs it: pasting it runs the same command.
    assert snap["command"] == "trainready run matmul --filter 'matmul/Qwen3-8B/*' --out 'my runs'"
    assert snap["os"] == f"{platform.system()} {platform.release()}"
    assert snap["platform"] == platform.platform()
    props = snap["device"]
    assert props["name"] and props["total_memory"] > 0
    assert props["threads"] == torch.get_num_threads() and props["logical_cpus"] >= 1
    assert props["runtime"]["torch"] == torch.__version__
    assert snap["vendor_stack"]["driver"] == {
        "version": None,
        "why": "the cpu has no device driver",
    }


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="runs from a git checkout only")
def test_snapshot_records_the_projects_git_sha():
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", snapshot("cpu")["git_sha"])


def test_git_sha_is_none_when_git_cannot_answer(monkeypatch):
    def no_git(cmd, **kw):
        raise FileNotFoundError(2, "No such file or directory: 'git'")

    monkeypatch.setattr(env.subprocess, "run", no_git)
    assert git_sha() is None

    def slow_status(cmd, **kw):  # the second call (is the tree dirty?) hangs
        if "status" in cmd:
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        return subprocess.CompletedProcess(cmd, 0, stdout="0" * 40 + "\n")

    monkeypatch.setattr(env.subprocess, "run", slow_status)
    assert git_sha() is None


def test_snapshot_of_a_gpu_without_its_vendor_tools_records_why(monkeypatch):
    # A CUDA device seen by a process that has neither pynvml, nvidia-smi nor a working CUDA.
    monkeypatch.setattr(
        device, "device_info", lambda d: {"device": d, "type": "cuda", "name": "GPU"}
    )
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", "")  # no nvidia-smi
    stack = snapshot("cuda:0")["vendor_stack"]
    assert stack["vendor"] == "nvidia"
    assert stack["driver"] == {
        "version": None,
        "why": "pynvml: not installed; nvidia-smi: not installed",
    }
    assert stack["nccl"] == {"version": None, "why": "torch.cuda.nccl: CUDA is not available"}


def test_credentials_are_never_recorded(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("NEURON_API_KEY", "k")
    env_vars = relevant_env_vars()
    assert env_vars["HF_TOKEN"] == "(redacted)" and env_vars["NEURON_API_KEY"] == "(redacted)"
    assert "hf_secret_value" not in str(env_vars)
