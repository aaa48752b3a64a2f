"""The zoo benchmark's tables (`benchmarks/zoo_table.py`): counts per modality and status, every
type that does not pass with its reason, and the types whose status changed."""

from benchmarks.zoo_table import tables

RESULTS = {
    "parity/hf/vit/eager/fp32": {"status": "pass", "modality": "vision"},
    "parity/hf/dinat/eager/fp32": {
        "status": "unsupported",
        "modality": "vision",
        "reason": "natten | not installed",
    },
    "parity/hf/bros/eager/fp32": {"status": "fail_numerics", "modality": "text-encoder"},
}


def test_counts_reasons_and_changes():
    text = tables(RESULTS, {"parity/hf/bros/eager/fp32": {"status": "pass"}})
    assert text.startswith("**3 types**: pass 1, fail_numerics 1, unsupported 1")
    assert "| vision | 1 | 0 | 0 | 1 |" in text
    assert "| dinat | vision | unsupported | natten / not installed |" in text  # a | escaped
    assert "| vit |" not in text.split("| type | before | now |")[0]  # passing: not listed
    assert "| bros | pass | fail_numerics |" in text
    assert "| dinat | (absent) | unsupported |" in text
