"""`--import MODULE` / TRAINREADY_IMPORT: the modules are imported in the CLI process, in every
case worker, in the ranks of the launcher and in loop processes; a module that fails to import
is one line naming it (exit 2) in the CLI, and a failed case in a worker, never a hang."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.clirun import ROOT, cli
from trainready import api
from trainready.cli.app import app
from trainready.core.case import Case
from trainready.core.config import RunConfig
from trainready.core.imports import ENV_VAR, ImportFailed, import_modules, requested
from trainready.core.launch import LaunchError, launch
from trainready.core.runner import Job, Runner
from trainready.core.store import Store
from trainready.profile import capture
from trainready.suites.train import loop

PROBE = "tests.support.import_probe_mod"
SUITE = "tests.support.import_probe_suite"
MISSING = "no_such_module_for_trainready"
MISSING_LINE = f"error: --import {MISSING}: ModuleNotFoundError: No module named '{MISSING}'"


@pytest.fixture
def probe_log(tmp_path, monkeypatch):
    """The file tests.support.import_probe_mod appends each importing process's pid to; the module is
    forgotten first, so this process imports it again."""
    log = tmp_path / "imported.log"
    log.touch()
    monkeypatch.setenv("IMPORT_PROBE_LOG", str(log))
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delitem(sys.modules, PROBE, raising=False)
    return log


def _pids(log: Path) -> set[int]:
    return {int(line) for line in log.read_text().split()}


def test_requested_reads_the_env_var_then_the_options(monkeypatch):
    monkeypatch.setenv(ENV_VAR, " a, b,,a ")
    assert requested(["c", "b"]) == ["a", "b", "c"]
    monkeypatch.delenv(ENV_VAR)
    assert requested() == []


def test_a_failed_import_is_one_line_naming_the_module():
    with pytest.raises(ImportFailed) as e:
        import_modules(["json", MISSING])
    assert f"error: {e.value}" == MISSING_LINE


def test_imports_are_part_of_the_settings_a_resume_matches():
    plain = RunConfig(suites=["matmul"])
    assert RunConfig(suites=["matmul"], imports=["a"]).identity() != plain.identity()
    # A run stored before the option existed has no imports, and matches a run without them.
    old = {k: v for k, v in plain.to_json().items() if k != "imports"}
    assert RunConfig.from_json(old).identity() == plain.identity()


@pytest.mark.parametrize("command", ["run", "devices", "profile"])
def test_help_shows_the_option(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "--import" in result.output
    assert "TRAINREADY_IMPORT" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["run", "matmul", "--device", "cpu", "--out", "out"],
        ["devices", "--out", "out"],
        ["profile", "--out", "out", "--", "python", "train.py"],
    ],
)
@pytest.mark.slow
def test_an_unknown_module_is_one_line_and_exit_2(tmp_path, args):
    (tmp_path / "train.py").write_text("raise SystemExit('must not run')\n")
    p = cli(args[0], "--import", MISSING, *args[1:], cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == MISSING_LINE
    assert p.stdout == ""
    assert not (tmp_path / "out").exists()  # nothing written


def test_devices_imports_before_listing(probe_log):
    result = CliRunner().invoke(app, ["devices", "--no-measure", "--import", PROBE])
    assert result.exit_code == 0, result.output
    assert _pids(probe_log) == {os.getpid()}


@pytest.mark.slow
def test_run_imports_in_the_cli_process_the_worker_and_its_ranks(tmp_path, probe_log):
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["run", SUITE, "--device", "cpu", "--import", PROBE, "--out", str(out), "--no-report"],
    )
    assert result.exit_code == 0, result.output
    assert PROBE in sys.modules and os.getpid() in _pids(probe_log)  # the CLI process
    with Store(out) as store:
        run = store.latest_run()
        results = {r.case.name: r for r in store.results(run.run_id)}
    assert run.config["imports"] == [PROBE]
    assert run.env["imports"][PROBE]["file"].endswith("import_probe_mod.py")
    for where in ("worker", "rank"):
        r = results[where]
        assert r.status == "pass", r.diagnostics
        assert r.metrics["imported"] == 1.0
        assert int(r.metrics["pid"]) in _pids(probe_log)
    # The worker passes the list on to what it starts (ranks, loop processes).
    assert results["worker"].diagnostics["env"] == PROBE
    assert len(_pids(probe_log)) == 3  # CLI, worker, rank


def test_the_env_var_imports_too_and_the_option_adds_to_it(tmp_path, probe_log, monkeypatch):
    monkeypatch.setenv(ENV_VAR, PROBE)
    summary = api.run([SUITE], device="cpu", out=tmp_path, imports=["json"], filter="*/worker")
    with Store(tmp_path) as store:
        assert store.get_run(summary.run_id).config["imports"] == [PROBE, "json"]
        [r] = store.results(summary.run_id)
    assert r.status == "pass" and r.metrics["imported"] == 1.0
    assert r.diagnostics["env"] == f"{PROBE},json"


def test_a_worker_that_cannot_import_fails_each_case_naming_the_module(tmp_path):
    results = []
    runner = Runner(log_dir=tmp_path, on_result=results.append, imports=[MISSING])
    ctx = {"device": "cpu", "dtype": None, "budget_s": 60.0, "run_dir": str(tmp_path)}
    jobs = [Job(Case("import_probe", w, {"where": w}), SUITE, 60.0, ctx) for w in ("a", "b")]
    try:
        runner.run(jobs)
    finally:
        runner.close()
    assert [r.status for r in results] == ["fail_run", "fail_run"]
    for r in results:
        assert MISSING_LINE.removeprefix("error: ") in r.diagnostics["error"]


@pytest.mark.slow
def test_a_rank_that_cannot_import_ends_the_launch_naming_the_module():
    with pytest.raises(LaunchError) as e:
        launch("tests.support.import_probe_suite:seen", 1, timeout_s=120, env={ENV_VAR: MISSING})
    assert MISSING_LINE in str(e.value) and not e.value.timed_out


def test_a_training_process_imports_first(tmp_path, probe_log, monkeypatch):
    spec, out = tmp_path / "spec.json", tmp_path / "out.json"  # no spec: the import comes first
    monkeypatch.setenv(ENV_VAR, PROBE)
    assert loop.main([str(spec), str(out)]) == 1
    assert os.getpid() in _pids(probe_log)
    assert "FileNotFoundError" in json.loads(out.read_text())["error"]

    monkeypatch.setenv(ENV_VAR, MISSING)
    assert loop.main([str(spec), str(out)]) == 1
    assert MISSING_LINE.removeprefix("error: ") in json.loads(out.read_text())["error"]


@pytest.mark.slow
def test_the_profiled_process_imports_first(tmp_path, probe_log, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text(f"import sys\nassert {PROBE!r} in sys.modules\n")
    monkeypatch.setenv(ENV_VAR, MISSING)
    assert capture.main(["--out", str(tmp_path / "p"), "--", str(script)]) == 2
    assert MISSING_LINE in capsys.readouterr().err

    monkeypatch.delenv(ENV_VAR)
    p = cli("profile", "--steps", "0", "--import", PROBE, "--out", str(tmp_path / "p"), "--",
            "python", str(script), cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert len(_pids(probe_log)) == 2  # the CLI process and the profiled one
    assert json.loads((tmp_path / "p" / "metadata.json").read_text())["imports"] == [PROBE]
