"""A directory's per-rank traces summarised side by side (`profile/per_rank.py`): the same
summaries, ranks and errors as loading the files one after another, from forked children."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support import paths
from tests.support.profile_traces import annotation, document, write
from trainready.core.concurrency import usable_cores
from trainready.profile import per_rank
from trainready.profile.summary import summary
from trainready.profile.trace import TraceError, load

REPO = paths.ROOT
DATA = REPO / "tests" / "data" / "traces"
# Three real traces, of ranks 0, 34 and 1 (their distributedInfo).
REAL = (
    "critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz",
    "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "trace_filter__sampled_rank-1.json.gz",
)


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINREADY_CACHE_DIR", str(tmp_path / "cache"))


def _sequential(path):
    """What `analyze` printed before: every file loaded in turn, then summarised."""
    return [summary(t) for t in load(path)]


def _dumps(summaries):
    return json.dumps(summaries, indent=1)


# Run in a fresh Python: forking waits for a process with no other thread (pytest-xdist's
# workers have some), and the pids it prints are those of the processes that made each summary.
_PIDS = """
import json, os, sys, threading
from trainready.profile import per_rank
from tests.support import paths

real = per_rank._summary


def recorded(*args):  # pickled by name (__main__.recorded): the forked child has it
    if sys.argv[4] == args[0].name:
        os._exit(9)  # that file's process dies
    return {**real(*args), "pid": os.getpid()}


per_rank._summary = recorded
if sys.argv[3] == "yes":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
workers = None if sys.argv[2] == "all" else int(sys.argv[2])
pids = [s["pid"] for s in per_rank.summaries(sys.argv[1], workers=workers)]
print(json.dumps({"summaries": pids, "self": os.getpid()}))
"""


def _run(path, workers="all", thread="no", die=""):
    cmd = [sys.executable, "-c", _PIDS, str(path), str(workers), thread, die]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)


def _pids(path, workers="all", thread="no"):
    """Which processes summarised the files at `path`: "here" (all in the process called),
    "children" (none there), or "mixed"."""
    p = _run(path, workers, thread)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    here = [pid == got["self"] for pid in got["summaries"]]
    return "here" if all(here) else "children" if not any(here) else "mixed"


def _ranked(tmp_path, ranks):
    """One small trace per rank, written in name order a, b, c... with distributedInfo."""
    for name, rank in zip("abcdef", ranks, strict=False):
        doc = document([annotation("ProfilerStep#1", 10.0 + rank, 5.0)])
        write(tmp_path / f"{name}.json", {**doc, "distributedInfo": {"rank": rank}})
    return tmp_path


@pytest.mark.parametrize("workers", [None, 1])
def test_the_summaries_are_those_of_a_sequential_load(tmp_path, workers):
    for name in REAL:
        shutil.copy(DATA / name, tmp_path / name)
    got = per_rank.summaries(tmp_path, workers=workers)
    assert _dumps(got) == _dumps(_sequential(tmp_path))
    assert [(s["rank"], os.path.basename(s["path"])) for s in got] == [
        (0, REAL[0]), (1, REAL[2]), (34, REAL[1])
    ]  # fmt: skip


def test_ranks_come_from_the_files_and_sort_the_summaries(tmp_path):
    got = per_rank.summaries(_ranked(tmp_path, [3, 1, 2, 0]))
    assert [(s["rank"], os.path.basename(s["path"])) for s in got] == [
        (0, "d.json"), (1, "b.json"), (2, "c.json"), (3, "a.json")
    ]  # fmt: skip
    assert _dumps(got) == _dumps(_sequential(tmp_path))


def test_repeated_ranks_are_numbered_in_name_order(tmp_path):
    got = per_rank.summaries(_ranked(tmp_path, [5, 5, 2]))
    assert [(s["rank"], os.path.basename(s["path"])) for s in got] == [
        (0, "a.json"), (1, "b.json"), (2, "c.json")
    ]  # fmt: skip


@pytest.mark.skipif(usable_cores() < 2, reason="one core: the files are summarised in turn")
def test_several_files_are_summarised_in_children_unless_a_thread_runs(tmp_path):
    """A thread could hold a lock the forked child would then wait on forever: with one
    running, the same directory is summarised here."""
    ranks = _ranked(tmp_path, [0, 1, 2, 3])
    assert _pids(ranks) == "children"
    assert _pids(ranks, thread="yes") == "here"


@pytest.mark.skipif(usable_cores() < 2, reason="one core: the files are summarised in turn")
def test_a_child_that_dies_is_a_trace_error_naming_the_directory(tmp_path):
    """The pool breaks for every file not yet done, so which one's process died is unknown."""
    p = _run(_ranked(tmp_path, [0, 1, 2]), die="b.json")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"trainready.profile.trace.TraceError: {tmp_path}: a process summarising its traces "
        "died (killed, or out of memory); analyze the files one at a time to find which"
    )


def test_one_file_or_one_worker_stays_in_this_process(tmp_path):
    assert _pids(_ranked(tmp_path, [0]) / "a.json") == "here"
    assert _pids(_ranked(tmp_path, [0, 1]), workers=1) == "here"


@pytest.mark.parametrize("workers", [None, 1])
def test_a_bad_file_is_the_error_of_the_first_in_name_order(tmp_path, workers):
    _ranked(tmp_path, [0, 1, 2])
    (tmp_path / "b.json").write_text('{"traceEvents": [')
    (tmp_path / "c.json").write_text("not json")
    with pytest.raises(TraceError, match=r"b\.json: "):
        per_rank.summaries(tmp_path, workers=workers)


def test_the_benchmarks_rank_copies_read_as_a_multi_rank_job(tmp_path):
    """`benchmarks.trace_analysis.ranked_copies` (the multi-rank directory it times against HTA):
    each copy carries its own rank, summarised like the one trace it copies."""
    from benchmarks.trace_analysis import ranked_copies

    source = DATA / REAL[0]
    got = per_rank.summaries(ranked_copies(source, 3, tmp_path / "ranks"))
    assert [s["rank"] for s in got] == [0, 1, 2]
    one = summary(load(source)[0])
    assert all({**s, "path": None, "rank": 0} == {**one, "path": None} for s in got)


def test_without_rows_the_summaries_are_the_same_less_the_timeline_rows():
    """`rows=False` (the printed analyze) leaves out the timeline's rows and nothing else."""
    path = DATA / REAL[0]
    full = per_rank.summaries(path)
    assert full[0]["rows"]
    less = per_rank.summaries(path, rows=False)
    assert less == [{k: v for k, v in s.items() if k != "rows"} for s in full]
