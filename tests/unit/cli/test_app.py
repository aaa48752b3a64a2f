"""The CLI end to end: bad input is one line and exit code 2; the matmul suite runs through it and
its report files are written and parseable."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.clirun import cli
from trainready.cli.commands.run import unused_flag_warnings
from trainready.core.config import DTYPES
from trainready.core.plan import shard_of
from trainready.metrics.peaks import KINDS
from trainready.models.specs import list_specs
from trainready.suites import FLAG_USERS, SUITES

ROOT = paths.ROOT


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "matmul", "--device", "tpu9"], "unknown device 'tpu9'; valid:"),
        (["run", "matmul", "--device", "cuda:0"], "not available"),
        (["run", "matmul", "--device", "cpu", "--shard", "5/2"], "malformed --shard '5/2'"),
        (["run", "nosuchsuite", "--device", "cpu"], "unknown suite 'nosuchsuite'; valid: matmul"),
        (["run", "matmul", "--device", "cpu", "--preset", "huge"], "unknown preset 'huge'"),
        (
            [
                "mfu",
                "--model",
                "gpt-17",
                "--seq-len",
                "8",
                "--tokens-per-s",
                "1",
                "--devices",
                "1",
                "--peak-tflops",
                "1",
            ],
            "unknown model 'gpt-17'",
        ),  # fmt: skip
        (["report", "does/not/exist"], "no trainready store"),
        # A flag the suite ignores is not worth a warning when the run is refused anyway.
        (["run", "matmul", "--device", "tpu9", "--baseline", "x"], "unknown device 'tpu9'"),
        # Usage errors, which Typer would draw as a box of several lines.
        (
            [
                "mfu",
                "--model",
                "qwen3-8b",
                "--tokens-per-s",
                "1",
                "--devices",
                "1",
                "--peak-tflops",
                "1",
            ],
            "error: missing option '--seq-len' (see ",
        ),  # fmt: skip
        (["nosuchcommand"], "no such command 'nosuchcommand'; valid commands: devices, run,"),
        (["run", "matmul", "--jobs", "many"], "invalid value for '--jobs'"),
        (["run"], "missing argument 'suites'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expected):
    out_dir = tmp_path / "out"
    if args[0] == "run":
        args = [*args, "--out", str(out_dir)]
    p = cli(*args, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]
    assert p.stdout == ""  # not even an empty line
    assert not (out_dir / "trainready.db").exists()  # nothing half-written


def test_malformed_config_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{ not json")
    p = cli("mfu", "--model", str(bad), "--seq-len", "8", "--tokens-per-s", "1", "--devices", "1",
            "--peak-tflops", "1")  # fmt: skip
    assert p.returncode == 2 and str(bad) in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_mfu_json_torchtitan_debug_model():
    p = cli("mfu", "--model", "qwen3-debugmodel", "--seq-len", "128", "--tokens-per-s", "1000",
            "--devices", "2", "--peak-tflops", "100", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["flops_per_token"] == 217_093_632
    assert got["params"] == 31_987_968
    assert got["mfu"] == pytest.approx(217_093_632 * 500 / 100e12)
    assert got["tflops_per_device"] == pytest.approx(217_093_632 * 500 / 1e12)


def test_help_explains_commands():
    p = cli("--help")
    assert p.returncode == 0
    for command in ("devices", "run", "report", "merge", "mfu"):
        assert command in p.stdout


def _help_text(*command: str) -> str:
    """A command's --help as one line of words: box borders and wrapping gone."""
    p = cli(*command, "--help")
    assert p.returncode == 0, p.stderr
    return " ".join(p.stdout.replace("│", " ").split())


def test_run_help_lists_every_suite_and_dtype():
    text = _help_text("run")
    assert f"Suites to run: {', '.join(SUITES)}, or all" in text
    assert "matmul" in SUITES and "fp64" in DTYPES
    assert f"--dtype <str> {', '.join(DTYPES)} (default: per suite)" in text


def test_run_and_ledger_help_explain_the_price_per_device_hour():
    text = _help_text("run")
    assert "--price-per-hour <float> Price of one device-hour, in your currency (same as --set" in (
        text
    )
    assert 'x P / 3600; without it, "no price given", never 0 (train).' in text
    text = _help_text("ledger")
    assert "--price-per-hour <float> Price of one device-hour" in text
    assert "cost(N) = (failed attempts + time to N steps) x price / 3600" in text
    assert "--failed-s <list[str]> [NAME:]SECONDS, repeatable" in text


def test_mfu_help_lists_the_named_models_and_device_kinds():
    text = _help_text("mfu")
    assert f"A named config ({', '.join(list_specs())};" in text
    assert f"A key of the peak table: {', '.join(KINDS)}." in text
    assert "Qwen3-8B" in list_specs() and "h200" in KINDS


def test_devices_without_measuring_creates_nothing(tmp_path, monkeypatch):
    # wide enough for one line per row: the name column's width is the machine's CPU name
    monkeypatch.setenv("COLUMNS", "200")
    p = cli("devices", "--no-measure", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "not measured (--no-measure)" in p.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_flag_no_suite_of_the_run_reads_is_a_one_line_warning(tmp_path):
    # One matmul case, left out by the shard: a real, valid run with nothing to execute.
    case = "matmul/Qwen3-8B/gate_proj/M128/fwd"
    shard = f"{1 - shard_of(case, 2)}/2"
    p = cli("run", "matmul", "--device", "cpu", "--filter", case, "--shard", shard,
            "--nproc", "2", "--baseline", "x", "--no-report", "--out", str(tmp_path))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        "warning: --nproc is ignored by matmul; used by train, dist",
        "warning: --baseline is ignored by matmul; used by parity",
    ]


def test_unused_flag_warnings_only_when_no_suite_of_the_run_reads_the_flag():
    assert set().union(*FLAG_USERS.values()) <= set(SUITES)
    assert unused_flag_warnings(["matmul", "train"], {"nproc": 2}) == []
    assert unused_flag_warnings(["all"], {"variants": "v.py", "baseline": "runs"}) == []
    assert unused_flag_warnings(["train"], {"variants": "v.py", "nproc": None}) == [
        "--variants is ignored by train; used by flex"
    ]
    # A suite given by module path may read any option: nothing to warn about.
    assert unused_flag_warnings(["tests.support.faulty_suite"], {"nproc": 2}) == []


@pytest.fixture(scope="module")
def matmul_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli")
    p = cli("run", "matmul", "--device", "cpu", "--preset", "quick", "--out", str(out),
            "--filter", "matmul/Qwen3-8B/*")  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    return out


@pytest.mark.slow
def test_matmul_end_to_end_reports(matmul_run):
    [run_dir] = [d for d in matmul_run.iterdir() if d.is_dir() and d.name != "logs"]
    report = json.loads((run_dir / "report.json").read_text())
    results = report["runs"][0]["results"]
    assert len(results) == 4
    assert all(r["status"] == "pass" for r in results)
    # Every MFU is against the same peak (one calibration per run), and one above 1 -- a peak
    # measured while this shared machine was busy -- is flagged, never shown as real.
    implied_peaks = [r["metrics"]["tflops"] / r["metrics"]["mfu"] for r in results]
    assert implied_peaks == pytest.approx([implied_peaks[0]] * 4, rel=1e-9)
    for r in results:
        assert r["metrics"]["tflops"] > 0 and r["metrics"]["mfu"] > 0
        assert (r["metrics"]["mfu"] > 1) == ("peak_warning" in r["diagnostics"])
    junit = ET.parse(run_dir / "report.junit.xml").getroot()
    assert sum(int(s.get("tests")) for s in junit.iter("testsuite")) == 4
    html = (run_dir / "report.html").read_text()
    assert "<svg" in html and "matmul/Qwen3-8B/gate_proj/M128/fwd" in html
    md = (run_dir / "report.md").read_text()
    assert "vs measured peak" in md


def _junit(out: Path) -> tuple[ET.Element, list[dict]]:
    """`report OUT --format junit`, parsed, and the run's results as report.json has them; the
    JUnit XML the run wrote at its end must be the same document."""
    p = cli("report", str(out), "--format", "junit")
    assert p.returncode == 0, p.stderr
    [run_dir] = [d for d in out.iterdir() if d.is_dir() and d.name != "logs"]
    assert p.stdout == (run_dir / "report.junit.xml").read_text()
    results = json.loads((run_dir / "report.json").read_text())["runs"][0]["results"]
    return ET.fromstring(p.stdout), results


def _counts(element: ET.Element) -> tuple[int, ...]:
    return tuple(int(element.get(k)) for k in ("tests", "failures", "errors", "skipped"))


@pytest.mark.slow
def test_report_command_writes_junit_ci_can_gate_on(matmul_run):
    root, results = _junit(matmul_run)
    assert _counts(root) == (4, 0, 0, 0)
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "matmul" and _counts(suite) == (4, 0, 0, 0)
    cases = {f"{tc.get('classname')}/{tc.get('name')}": tc for tc in suite.iter("testcase")}
    assert sorted(cases) == sorted(r["case_id"] for r in results)  # one testcase per case
    for r in results:
        tc = cases[r["case_id"]]
        assert list(tc) == []  # passed: no <failure>, no <skipped>
        assert float(tc.get("time")) == pytest.approx(r["duration_s"], abs=5e-4)
    p = cli("report", str(matmul_run), "--format", "pdf")
    assert p.returncode == 2 and "valid" in p.stderr


@pytest.mark.slow
def test_junit_names_each_failure_and_gap_with_its_reason(tmp_path):
    """A failing case is a <failure> whose message is the error and whose text holds the
    traceback; an unsupported one is <skipped> with the backend's reason."""
    out = tmp_path / "runs"
    p = cli("run", "tests.support.faulty_suite", "--device", "cpu", "--out", str(out),
            "--set", 'kinds=["ok", "raises", "unsupported"]')  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    root, results = _junit(out)
    assert _counts(root) == (3, 1, 0, 1)
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert sorted(cases) == sorted(r["name"] for r in results)
    assert list(cases["00-ok"]) == []
    failure = cases["01-raises"].find("failure")
    assert failure.get("type") == "fail_run"
    assert failure.get("message") == "ValueError: planted failure"
    assert 'raise ValueError("planted failure")' in failure.text  # the traceback, for the CI log
    (skipped,) = list(cases["02-unsupported"])
    assert skipped.tag == "skipped"
    assert skipped.get("message") == "unsupported: this backend has no such thing"


@pytest.mark.slow
def test_shards_merge_to_the_whole_run(tmp_path):
    args = ["--device", "cpu", "--filter", "matmul/Qwen3-8B/*", "--no-report"]
    for i in range(2):
        assert (
            cli(
                "run", "matmul", *args, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")
            ).returncode
            == 0
        )
    p = cli("merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m"))
    assert p.returncode == 0, p.stderr
    from trainready.core.store import Store

    with Store(tmp_path / "m", create=False) as store:
        run = store.latest_run()
        ids = [r.case_id for r in store.results(run.run_id)]
    assert len(ids) == 4 and len(set(ids)) == 4 and run.planned == 4
