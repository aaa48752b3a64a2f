"""Installing trainready beside a torch chosen on purpose: the README and docs/usage.md name exactly
the runtime requirements pyproject.toml lists (torch left out), CI's range step reads them the
same way (scripts/ci/runtime_deps.py), and a missing optional one (msgspec) is one line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

VENDOR_LINE = re.compile(r"python -m pip install ((?:[a-z]+ )*isal)\b")


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]


def _runtime_names() -> set[str]:
    """pyproject's dependencies but torch, and those for older Pythons only (tomli)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {_name(r) for r in deps if _name(r) != "torch" and "python_version" not in r}


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_the_vendor_install_names_every_runtime_requirement(doc):
    lines = VENDOR_LINE.findall((ROOT / doc).read_text())
    assert lines, f"{doc} has no `pip install … isal` line for the install beside a vendor's torch"
    for line in lines:
        assert set(line.split()) == _runtime_names()


def test_the_range_step_reads_the_same_requirements():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/ci/runtime_deps.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    names = {_name(r) for r in out if r and "python_version" not in r}
    assert names == _runtime_names()


def test_the_range_step_adds_an_extra_and_refuses_an_unknown_one():
    run = [sys.executable, str(ROOT / "scripts/ci/runtime_deps.py")]
    hf = subprocess.run([*run, "hf"], capture_output=True, text=True, check=True).stdout
    assert any(_name(r) == "transformers" for r in hf.splitlines())
    bad = subprocess.run([*run, "nope"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error: no extra nope")


def test_without_msgspec_analyze_says_so_in_one_line(tmp_path):
    """msgspec is missing on some vendor images: `analyze` says what to install, exit 2, no
    traceback (the import is blocked in a fresh interpreter, as if it were not installed)."""
    trace = next((ROOT / "tests/data/traces").glob("*.json.gz"))
    code = (
        "import sys; sys.modules['msgspec'] = None; sys.argv = ['trainready', 'analyze', "
        f"{str(trace)!r}]; from trainready.cli.entry import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: reading a profiler trace needs msgspec")
    assert "Traceback" not in done.stderr


def test_the_declared_floor_is_the_one_ci_tests():
    """pyproject's `torch>=X` is compat's TORCH_FLOOR, which CI's range smoke runs on."""
    from trainready.device.compat import TORCH_FLOOR, parse_version

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [r for r in deps if _name(r) == "torch"]
    assert parse_version(torch.removeprefix("torch>=")) == parse_version(TORCH_FLOOR)
