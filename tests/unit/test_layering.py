"""Who may import whom (docs/architecture.md, "Import rules"), read from the source.

The import graph of trainready/ is built with `ast`, without importing anything: every `import` and
`from ... import` at any level (module, function, `if TYPE_CHECKING:`; a lazy import is still an
edge), relative imports resolved, and `from pkg import name` counted as importing `pkg.name` where
that is a module. On it:

- trainready.core.config is the base: it imports nothing of trainready, and every layer may
  import it;
- the device layer (device/) imports nothing of trainready above it: only device/ itself,
  core.config and the datasheet peak table (metrics.peaks: pure data that itself imports only
  core.config);
- probes/ import no suite; models/ import no suite or probe;
- core/ reaches suites only through the registry (`trainready.suites`), never a suite module;
- reporting/ and metrics/ import no torch, at any level;
- no import cycles: no strongly connected component of more than one module.

And the module paths written as strings (`python -m trainready.suites.train.loop`, a rank target
`trainready.suites.dist.rank:run_case`) move with their modules: each one in trainready/ and
benchmarks/ resolves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "trainready"
BASE = "trainready.core.config"
# What the device layer may read besides itself and the base: the datasheet peaks (pure data).
DEVICE_ALSO = ("trainready.metrics.peaks",)
REGISTRY = "trainready.suites"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. trainready.device.peak
    target: str  # what it imports: a trainready module, or a dotted name outside (torch.nn)
    where: str  # path:line of the import statement

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    where = path.relative_to(ROOT).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name`: the module pkg.name where there is one, else pkg itself
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        out += [Import(name, t, f"{where}:{node.lineno}") for t in dict.fromkeys(targets)]
    return out


@cache
def _graph() -> dict[str, list[Import]]:
    """Every trainready module -> its imports (each once per statement), in source order."""
    modules = _modules()
    return {name: _imports_of(name, path, modules) for name, path in modules.items()}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _breaking(rule: Callable[[Import], bool], sources: str) -> list[Import]:
    return [i for m, imps in _graph().items() if _within(m, sources) for i in imps if rule(i)]


def _assert_none(broken: list[Import], rule: str) -> None:
    assert not broken, f"{rule}:\n" + "\n".join(f"  {i}" for i in broken)


def test_the_graph_sees_every_kind_of_import():
    """Guards the rules below against a graph that misses imports (and so passes anything)."""
    edges = {(i.source, i.target) for imps in _graph().values() for i in imps}
    assert ("trainready.core.plan", REGISTRY) in edges  # module level
    assert ("trainready.core.worker", REGISTRY) in edges  # function level
    # `from trainready.profile import analysis as A`: the module, not the package
    assert ("trainready.profile.summary", "trainready.profile.analysis") in edges
    assert ("trainready.device.runtime", "torch") in edges
    assert len(_graph()) > 150


def test_core_config_is_the_base_and_imports_nothing_of_trainready():
    broken = [i for i in _graph()[BASE] if _within(i.target, "trainready")]
    _assert_none(broken, f"{BASE}, the base every layer imports, imports nothing of trainready")


def test_the_device_layer_imports_nothing_above_it():
    allowed = ("trainready.device", BASE, *DEVICE_ALSO)

    def above(i: Import) -> bool:
        return _within(i.target, "trainready") and not any(_within(i.target, a) for a in allowed)

    _assert_none(
        _breaking(above, "trainready.device"),
        f"the device layer imports only trainready.device.*, {', '.join(allowed[1:])}",
    )
    # What the device layer may read must not pull the rest in behind it.
    for name in DEVICE_ALSO:
        broken = [i for i in _graph()[name] if _within(i.target, "trainready") and i.target != BASE]
        _assert_none(broken, f"{name}, which the device layer reads, imports only {BASE}")


def test_probes_import_no_suite():
    _assert_none(
        _breaking(lambda i: _within(i.target, REGISTRY), "trainready.probes"),
        "probes import no suite (nor the suite registry)",
    )


def test_models_import_no_suite_or_probe():
    def upward(i: Import) -> bool:
        return _within(i.target, REGISTRY) or _within(i.target, "trainready.probes")

    _assert_none(_breaking(upward, "trainready.models"), "models import no suite or probe")


def test_core_reaches_suites_only_through_the_registry():
    def by_name(i: Import) -> bool:
        return _within(i.target, REGISTRY) and i.target != REGISTRY

    _assert_none(
        _breaking(by_name, "trainready.core"),
        f"core reaches suites only through the registry ({REGISTRY}: load_suite, SUITES)",
    )


@pytest.mark.parametrize("package", ["trainready.reporting", "trainready.metrics"])
def test_reporting_and_metrics_import_no_torch(package):
    _assert_none(
        _breaking(lambda i: _within(i.target, "torch"), package),
        f"{package} imports no torch (a report, gate or analyze never pays for loading it)",
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycles_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_there_are_no_import_cycles():
    graph = {
        m: {i.target for i in imps if i.target in _graph() and i.target != m}
        for m, imps in _graph().items()
    }
    lines = []
    for component in _cycles(graph):
        inside = [i for m in component for i in _graph()[m] if i.target in component]
        lines += [f"cycle of {len(component)}: {', '.join(component)}"]
        lines += [f"  {i}" for i in inside]
    assert not lines, "import cycles (cut each by moving the shared piece down):\n" + "\n".join(
        lines
    )


# -- module paths written as strings --------------------------------------------------------------
_DOTTED = re.compile(r"trainready(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?")
# Strings of that shape that name no module: the store's file name (core.store.DB_NAME).
NOT_MODULES = frozenset({"trainready.db"})


@cache
def _module_strings() -> list[tuple[str, str]]:
    """(path:line, text) of every string literal in trainready/ and benchmarks/ that is a whole
    dotted trainready module path, optionally `:attr`."""
    out = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.strip()
                if _DOTTED.fullmatch(text) and text not in NOT_MODULES:
                    out.append((f"{path.relative_to(ROOT).as_posix()}:{node.lineno}", text))
    return out


def _spec(name: str) -> ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a parent package that does not exist
        return None


def _resolves(text: str) -> str | None:
    """None when `text` names a module, or an attribute of one that exists (`module:attr`, or
    `module.attr` where that is no module); else why not."""
    module, _, attr = text.partition(":")
    if not attr and _spec(module) is None:  # maybe module.attr
        parent, _, attr = module.rpartition(".")
        if _spec(parent) is None:
            return f"no module {module}"
        obj = importlib.import_module(parent)
        return (
            None if hasattr(obj, attr) else f"no module {module}, nor attribute {attr} of {parent}"
        )
    if _spec(module) is None:
        return f"no module {module}"
    obj = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        if not hasattr(obj, part):
            return f"module {module} has no attribute {attr}"
        obj = getattr(obj, part)
    return None


def test_the_string_scan_finds_the_module_paths_it_is_for():
    found = {text for _, text in _module_strings()}
    assert {"trainready.suites.train.loop", "trainready.suites.dist.rank:run_case"} <= found


def test_every_module_path_written_as_a_string_resolves():
    broken = [
        f"  {where}: {text!r}: {why}"
        for where, text in _module_strings()
        if (why := _resolves(text))
    ]
    assert not broken, "module paths in strings that resolve to nothing:\n" + "\n".join(broken)


def test_the_resolver_catches_a_moved_module_and_a_missing_attribute():
    assert _resolves("trainready.core.config") is None
    assert _resolves("trainready.core.config:ConfigError") is None
    assert _resolves("trainready.core.config.ConfigError") is None
    assert _resolves("trainready.core.nowhere") == (
        "no module trainready.core.nowhere, nor attribute nowhere of trainready.core"
    )
    assert _resolves("trainready.nowhere.mod") == "no module trainready.nowhere.mod"
    assert _resolves("trainready.nowhere.mod:f") == "no module trainready.nowhere.mod"
    assert _resolves("trainready.core.config:Nothing") == (
        "module trainready.core.config has no attribute Nothing"
    )
