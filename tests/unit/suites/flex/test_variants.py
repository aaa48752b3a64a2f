"""User variant files for the flex suite: both forms of the contract (a VARIANTS dict, a module of
named functions), the budget they carry, and every mistake as one line naming the file, raised
when the run is planned, including the ones only calling the code reveals (flex.probe_user_variant).
"""

from __future__ import annotations

import re
import signal
import sys
import textwrap

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module

from tests.unit.suites.flex.test_suite import SHAPE, _cases, _inputs
from trainready import api
from trainready.core.config import ConfigError, RunConfig
from trainready.core.plan import plan
from trainready.suites.flex import suite as flex
from trainready.suites.flex.variants import BUILTIN, load_user_variants

GOOD = """
import math

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx

def half(score, b, h, q_idx, kv_idx):
    return score * 0.5

VARIANTS = {
    "half_causal": {"score_mod": half, "mask_mod": causal, "budget_s": 7},
    "built": {"build": lambda shape, device: {"score_mod": half}, "description": "built"},
}
"""

# The module docstring's example of the functions form, plus what the form must leave out.
FUNCTIONS = '''
from os.path import join  # imported: not a variant

import torch


def _scale(x):  # private: a helper
    return x * 0.1


def distance_bias(score, b, h, q_idx, kv_idx):
    """Linear penalty on the distance |q - kv|."""
    return score - _scale((q_idx - kv_idx).abs())


def distance_bias_reference(scores, b, h, q_idx, kv_idx):
    return scores - 0.1 * (q_idx - kv_idx).abs()


def band(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= 64


def capped(score, b, h, q_idx, kv_idx, cap=30.0):  # a default: still a score_mod, as flex counts
    return cap * torch.tanh(score / cap)
'''


def _write(tmp_path, text: str, name: str = "variants.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# --- the VARIANTS dict ----------------------------------------------------------------------------


def test_user_variants_join_every_preset_with_their_budget(tmp_path):
    path = _write(tmp_path, GOOD)
    cases = _cases("standard", variants=path)
    user = [c for c in cases if c.params["user"]]
    assert {c.params["variant"] for c in user} == {"half_causal", "built"}
    assert len(user) == 2 * 64
    assert {c.params.get("budget_s") for c in user if c.params["variant"] == "half_causal"} == {7}


def test_an_explicit_budget_flag_wins_over_the_files_budget(tmp_path):
    """The case carries the file's budget; the plan resolves it against --budget-s."""
    path = _write(tmp_path, GOOD)

    def budgets(budget_s: float | None) -> set[float]:
        cfg = RunConfig(
            suites=["flex"], preset="quick", budget_s=budget_s, options={"variants": path}
        )
        [suite] = plan(cfg)
        return {suite.budget_s(cfg, c) for c in suite.cases if c.params["variant"] == "half_causal"}

    assert budgets(None) == {7.0}
    assert budgets(30.0) == {30.0}


def test_a_user_variant_without_reference_is_checked_against_its_own_mods(tmp_path):
    variant = load_user_variants(_write(tmp_path, GOOD))["half_causal"]
    mods = variant.build(SHAPE, "cpu")
    x = _inputs()
    got = flex.dense_attention(x, mods, torch.float64, "cpu", grad=False)["out"]
    scaled = flex.Inputs(x.q * 0.5, x.k, x.v, x.grad_out)  # half the scores = half the q
    causal = BUILTIN["causal"].build(SHAPE, "cpu")
    want = flex.dense_attention(scaled, causal, torch.float64, "cpu", grad=False)["out"]
    torch.testing.assert_close(got, want)


# --- a module of named functions ------------------------------------------------------------------


def test_a_module_of_functions_is_a_variant_per_public_function(tmp_path):
    path = _write(tmp_path, FUNCTIONS)
    table = load_user_variants(path)
    assert list(table) == ["distance_bias", "band", "capped"]
    bias, band, capped = (table[n].build(SHAPE, "cpu") for n in table)
    assert bias.score_mod.__name__ == "distance_bias" and bias.mask_mod is None
    assert bias.reference.__name__ == "distance_bias_reference"
    assert table["distance_bias"].description == "Linear penalty on the distance |q - kv|."
    assert band.mask_mod.__name__ == "band" and band.score_mod is None
    assert capped.score_mod.__name__ == "capped"
    assert sys.modules[capped.score_mod.__module__]  # dynamo finds `torch` there when compiling
    user = {c.params["variant"] for c in _cases("quick", variants=path) if c.params["user"]}
    assert user == set(table)


def test_a_functions_reference_judges_its_variant(tmp_path):
    """The `_reference` function, not the mod, is what the dense reference applies."""
    mods = load_user_variants(_write(tmp_path, FUNCTIONS))["distance_bias"].build(SHAPE, "cpu")
    x = _inputs()
    planted = flex.Mods(mods.score_mod, None, lambda s, b, h, q, kv: s)  # the bias left out
    got = flex.dense_attention(x, mods, torch.float64, "cpu", grad=False)["out"]
    plain = flex.dense_attention(x, planted, torch.float64, "cpu", grad=False)["out"]
    assert not torch.allclose(got, plain)


# --- one line naming the file, at planning --------------------------------------------------------

_BROKEN = [
    # the file's form
    ("VARIANTS = {\n", "cannot import it: SyntaxError"),
    ("import no_such_module_here\n", "cannot import it: ModuleNotFoundError"),
    ("X = 1\n", "defines no VARIANTS dict and no score_mod/mask_mod functions"),
    ("VARIANTS = 3\n", "VARIANTS is not a dict of named variants"),
    ("VARIANTS = {'a': {'score_mod': len, 'colour': 1}}\n", "unknown keys ['colour']"),
    ("VARIANTS = {'a': {'reference': len}}\n", "needs a score_mod, a mask_mod or both"),
    ("VARIANTS = {'a': {'score_mod': 3}}\n", "score_mod is not callable"),
    ("VARIANTS = {'causal': {'score_mod': len}}\n", "clashes with the built-in"),
    ("VARIANTS = {'a b': {'score_mod': len}}\n", "names may hold only"),
    ("VARIANTS = {'a': {'score_mod': len, 'budget_s': -1}}\n", "budget_s must be a positive"),
    ("VARIANTS = {'a': {'build': len, 'score_mod': len}}\n", "either a callable build"),
    # signatures, read without calling
    (
        "VARIANTS = {'a': {'score_mod': lambda s: s}}\n",
        "variant 'a': score_mod takes 1 positional argument(s), but is called with 5:"
        " (score, b, h, q_idx, kv_idx)",
    ),
    (
        "VARIANTS = {'a': {'mask_mod': lambda b, h, q, kv: q >= kv, 'reference': lambda s: s}}\n",
        "variant 'a': reference takes 1 positional argument(s), but is called with 5:"
        " (scores, b, h, q_idx, kv_idx)",
    ),
    (
        "def band(b, h, q, kv):\n    return q >= kv\n\ndef slopes(heads):\n    return heads\n",
        "function 'slopes' takes (heads): a variant is a score_mod (score, b, h, q_idx, kv_idx)"
        " or a mask_mod (b, h, q_idx, kv_idx); start a helper's name with '_'",
    ),
    (
        "def band(b, h, q, kv):\n    return q >= kv\n\ndef band_reference(b, h, q, kv):\n"
        "    return q >= kv\n",
        "function 'band_reference' takes (b, h, q, kv): a reference takes"
        " (scores, b, h, q_idx, kv_idx)",
    ),
    (
        "def other_reference(s, b, h, q, kv):\n    return s\n",
        "function 'other_reference': no score_mod or mask_mod 'other' in the file",
    ),
    (
        "def causal(b, h, q, kv):\n    return q >= kv\n",
        "variant 'causal': clashes with the built-in",
    ),
    # what only calling the code reveals (the planning probe)
    (
        "def window(b, h, q, kv):\n    return q - kv <= windw\n",
        "variant 'window': mask_mod in create_block_mask: NameError: name 'windw' is not defined",
    ),
    (
        "def bias(score, b, h, q, kv):\n    return score + undefined_bias[h]\n",
        "variant 'bias': eager flex_attention with its mods: NameError: name 'undefined_bias'",
    ),
    (
        "def scalar(score, b, h, q, kv):\n    return 1.0\n",
        "variant 'scalar': eager flex_attention with its mods: ValueError: ",
    ),
    (
        "def half(score, b, h, q, kv):\n    return score / 2\n\n"
        "def half_reference(s, b, h, q, kv):\n    return (s / 2).sum(-1)\n",
        "variant 'half': dense reference: ValueError: the reference returned shape [1, 2, 128],"
        " not a tensor of the scores' shape [1, 2, 128, 128]",
    ),
    (
        "def half(score, b, h, q, kv):\n    return score / 2\n\n"
        "def half_reference(s, b, h, q, kv):\n    return None\n",
        "variant 'half': dense reference: ValueError: the reference returned NoneType",
    ),
    (
        "VARIANTS = {'a': {'build': lambda shape, device: {'score_mod': len, 'refrence': len}}}\n",
        "variant 'a': build(shape, device): unknown keys ['refrence']",
    ),
    (
        "VARIANTS = {'a': {'build': lambda shape, device: {'score_mod': lambda s: s}}}\n",
        "variant 'a': build(shape, device): score_mod takes 1 positional argument(s)",
    ),
    (
        "TABLES = {}\nVARIANTS = {'a': {'build': lambda shape, device: TABLES[shape.S]}}\n",
        "variant 'a': build(shape, device): KeyError: 128",
    ),
]


@pytest.mark.parametrize(("text", "expected"), _BROKEN)
def test_a_broken_user_file_is_one_error_naming_it(tmp_path, text, expected):
    path = _write(tmp_path, text, name=f"broken_{abs(hash(text))}.py")
    with pytest.raises(ConfigError, match=re.escape(expected)) as info:
        _cases("quick", variants=path)
    assert str(info.value).startswith(f"--variants {path}: ")
    assert "\n" not in str(info.value)
    assert not flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG  # the probe put it back


def test_planning_calls_user_code_but_leaves_wrong_values_to_the_device_run(tmp_path):
    """A mod that runs but is wrong plans fine: the device run fails it as fail_numerics."""
    wrong = "def zeroed(score, b, h, q, kv):\n    return score * 0\n\n"
    wrong += "def zeroed_reference(s, b, h, q, kv):\n    return s\n"
    cases = _cases("quick", variants=_write(tmp_path, wrong))
    assert {c.params["variant"] for c in cases if c.params["user"]} == {"zeroed"}


def test_a_missing_user_file_stops_the_run_before_it_starts(tmp_path):
    missing = str(tmp_path / "nope.py")
    with pytest.raises(ConfigError, match=re.escape(f"--variants {missing}: no such file")):
        api.run(["flex"], device="cpu", out=tmp_path / "out", options={"variants": missing})
    assert not (tmp_path / "out" / "trainready.db").exists()


def test_a_user_mod_that_hangs_when_called_is_an_error_not_a_hung_plan(tmp_path, monkeypatch):
    monkeypatch.setattr(flex, "PROBE_LIMIT_S", 0.5)
    hangs = "def stuck(b, h, q, kv):\n    while True:\n        pass\n"
    with pytest.raises(ConfigError, match=r"variant 'stuck': .*did not return within 0.5 s"):
        _cases("quick", variants=_write(tmp_path, hangs))
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no alarm left behind
