"""An optional model library that imports under its name but is not it (a folder named timm on
sys.path, e.g. a run's output directory in the working directory) is the library unavailable,
with the reason: never an AttributeError that stops the whole run at planning."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from trainready.models.zoo import timm as timm_zoo
from trainready.models.zoo.optional import the_library


def test_a_namespace_package_is_not_the_library(tmp_path):
    namespace = types.ModuleType("timm")
    namespace.__path__ = [str(tmp_path / "timm")]  # what `import timm` makes of a bare folder
    with pytest.raises(ImportError, match=r"'timm' resolves to the directory .*timm, not the timm"):
        the_library(namespace)
    assert the_library(pytest) is pytest  # a real package passes through


@pytest.mark.skipif(
    importlib.util.find_spec("timm") is not None, reason="a real timm wins over a bare folder"
)
def test_a_folder_named_timm_makes_the_zoo_unavailable_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "timm").mkdir()  # e.g. `--out timm` in the directory the next run starts from
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "timm", raising=False)
    with pytest.raises(ImportError, match="resolves to the directory"):
        timm_zoo.model_names()
