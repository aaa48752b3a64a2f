"""`benchmarks.trace_analysis`: which traces its whole-process rounds time, and how each one's
issue #39 target is judged and summed up."""

from __future__ import annotations

from pathlib import Path

from benchmarks.trace_analysis import target, targets_line, whole_paths


def test_a_file_over_1_mb_is_judged_against_hta_and_a_smaller_one_against_the_floor():
    row = {"speedup_wall": 10.0, "floor_ratio_wall": 3.0}
    assert target(1_000_001, row) == {"what": "speedup_wall", "goal": 10.0, "value": 10.0,
                                      "met": True}  # fmt: skip
    assert not target(1_000_001, {**row, "speedup_wall": 9.99})["met"]
    small = target(1_000_000, {"speedup_wall": 50.0, "floor_ratio_wall": 1.2})
    assert small["what"] == "floor_ratio_wall" and small["met"]
    assert not target(10, {"speedup_wall": 50.0, "floor_ratio_wall": 1.21})["met"]


def test_a_missing_reading_is_not_met():
    """A side that failed (HTA could not read the trace, or our run erred) meets nothing."""
    assert target(2_000_000, {"floor_ratio_wall": 1.0}) == {
        "what": "speedup_wall", "goal": 10.0, "value": None, "met": False}  # fmt: skip
    assert not target(10, {})["met"]


def test_the_summary_line_counts_each_target_and_names_the_worst():
    targets = {
        "big_a": target(2_000_000, {"speedup_wall": 12.0}),
        "big_b": target(2_000_000, {"speedup_wall": 8.5}),
        "small_a": target(10, {"floor_ratio_wall": 1.1}),
        "small_b": target(10, {"floor_ratio_wall": 1.05}),
    }
    line = targets_line(targets)
    assert "1/2 >= 10x HTA (worst 8.50x, big_b)" in line
    assert "2/2 <= 1.2x the floor (worst 1.10x, small_a)" in line
    assert line.endswith(": 1 not met")
    met = {k: v for k, v in targets.items() if k != "big_b"}
    assert targets_line(met).endswith(": all met")


def test_whole_processes_take_every_trace_file_largest_first(tmp_path: Path):
    for name, size in (("a.json.gz", 5), ("b.json", 50), ("c.json.gz", 20), ("notes.md", 99)):
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "sub.json").mkdir()
    assert [p.name for p in whole_paths(tmp_path, None)] == ["b.json", "c.json.gz", "a.json.gz"]
    assert [p.name for p in whole_paths(tmp_path, ["a.", "c."])] == ["c.json.gz", "a.json.gz"]
