"""Which parity cases a run plans: the model zoos and the synthetic matrix, each in its (mode,
dtype) pairs, narrowed by the preset and `--set` options (the suite's contract: `suite.py`).

Presets: smoke = two causal LMs (one dense, one MoE) + the synthetic base; quick = the causal-LM
zoo eager fp32, a sample of the task zoo (`QUICK_TASK_TYPES`, two or three per modality) eager
fp32 (the timm and diffusers zoos only when `--set zoo=` names them, then their first models), +
the synthetic base and one-axis variants, eager and compile, fp32; standard = every HF type
(causal and task) and every timm and diffusers model, eager and compiled, + the synthetic
combinations; full = all of it in fp32 and bf16. Case ids: `<source>/<model>/<mode>/<dtype>`.
"""

from __future__ import annotations

from typing import Any

from trainready.core.case import Case
from trainready.core.config import RunConfig
from trainready.device import default_compile_backend
from trainready.models.zoo.families import MODALITIES
from trainready.suites.parity.models import hf_modality, zoo_module

NAME = "parity"
MODES = ("eager", "compile")
STEPS = 20
SEED = 0
# The smoke preset's Hugging Face types: one dense decoder and one MoE.
SMOKE_HF_TYPES = ("llama", "qwen3_moe")
# The quick preset's sample of the task zoo: fast types, two or three per modality (the whole
# zoo is the standard preset's).
QUICK_TASK_TYPES = (
    "albert",
    "distilbert",
    "t5",
    "m2m_100",
    "vit",
    "convnext",
    "wav2vec2",
    "speech_to_text",
    "vivit",
    "videomae",
    "clip",
    "llava",
    "patchtst",
)
QUICK_ZOO_MODELS = 2  # first models of the timm and diffusers zoos when quick names them
DEFAULT_ZOO = ("hf", "timm", "diffusers", "synthetic")
# smoke and quick leave the library zoos out unless `--set zoo=` names them: importing diffusers
# alone costs seconds before the first case, and their conv models still need the CPU's fp32
# baseline to reorder convolutions (the standard preset runs them, each with its status).
QUICK_ZOO = ("hf", "synthetic")


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _grid(cfg: RunConfig) -> dict[str, list[tuple[str, str]]]:
    """(mode, dtype) pairs per model source for the preset, narrowed by --dtype and --set modes."""
    dtypes = ["fp32", "bf16"] if cfg.preset == "full" else ["fp32"]
    if cfg.dtype:
        dtypes = [cfg.dtype]
    return mode_pairs(cfg.preset, dtypes, cfg.options)


def mode_pairs(
    preset: str, dtypes: list[str], options: dict[str, Any]
) -> dict[str, list[tuple[str, str]]]:
    modes = _list(options.get("modes")) or list(MODES)
    hf_modes = ["eager"] if preset in ("smoke", "quick") else list(MODES)
    pairs = {
        "hf": [(m, d) for m in hf_modes for d in dtypes if m in modes],
        "synthetic": [(m, d) for m in MODES for d in dtypes if m in modes],
        "factory": [(m, d) for m in MODES for d in dtypes if m in modes],
    }
    return pairs


def _case(name: str, params: dict[str, Any], mode: str, dtype: str, cfg: RunConfig) -> Case:
    params = {**params, "mode": mode, "dtype": dtype, "steps": int(cfg.options.get("steps", STEPS))}
    # planned with the case, so a case that ends before recording it (a crash, a raise) still
    # counts under its modality
    params["modality"] = declared_modality(params)
    if mode == "compile":
        # the device's own default where the user chose none (openxla on xla, else inductor)
        chosen = cfg.options.get("compile_backend")
        params["compile_backend"] = chosen or default_compile_backend(cfg.device)
    return Case(NAME, f"{name}/{mode}/{dtype}", params)


def _zoo(cfg: RunConfig) -> tuple[list[str], list[str]]:
    """(sources, modalities) `--set zoo=` selects: modality names narrow the model zoos (hf,
    timm, diffusers, or those named) to those modalities; without a source they select from
    all three."""
    zoo = _list(cfg.options.get("zoo")) or list(
        QUICK_ZOO if cfg.preset in ("smoke", "quick") else DEFAULT_ZOO
    )
    modalities = [z for z in zoo if z in MODALITIES]
    sources = [z for z in zoo if z not in MODALITIES]
    if modalities and not sources:
        sources = ["hf", "timm", "diffusers"]
    return sources, modalities


def _hf_cases(cfg: RunConfig, modalities: list[str]) -> list[Case]:
    """The transformers zoo: causal LMs (`hf`) and every other type with a task head
    (`hf_task`), ids hf/<type>/<mode>/<dtype> for both."""
    try:
        from trainready.models.zoo import hf_tasks
        from trainready.models.zoo.hf_causal import model_types

        causal, tasks = model_types(), hf_tasks.model_types()
    except ImportError as e:  # the zoo needs transformers: say so in a case, never drop it
        why = f"the Hugging Face zoo needs transformers: {e}"
        return [Case(NAME, "hf/unavailable", {"source": "unavailable", "reason": why})]
    types = _list(cfg.options.get("hf_types"))
    if not types and cfg.preset == "smoke":
        types = list(SMOKE_HF_TYPES)
    elif not types:
        sample = cfg.preset in ("smoke", "quick")
        types = causal + (list(QUICK_TASK_TYPES) if sample else tasks)
    if modalities:
        types = [t for t in types if hf_modality(t) in modalities]
    grid = _grid(cfg)["hf"]
    out = []
    for t in types:
        p = {"source": "hf_task" if t in tasks else "hf", "model": t}
        out += [_case(f"hf/{t}", p, m, d, cfg) for m, d in grid]
    return out


def _library_cases(source: str, cfg: RunConfig, modalities: list[str]) -> list[Case]:
    """The timm or diffusers zoo (`models/zoo/timm.py`, `models/zoo/diffusers.py`); one unavailable case
    saying why when the library or the zoo is not installed."""
    try:
        names = zoo_module(source).model_names()
    except ImportError as e:
        why = f"the {source} zoo needs {source}: {e}"
        p = {"source": "unavailable", "reason": why, "modality": LIBRARY_MODALITY[source]}
        return [Case(NAME, f"{source}/unavailable", p)]
    if modalities and LIBRARY_MODALITY[source] not in modalities:
        return []
    if cfg.preset in ("smoke", "quick"):
        names = names[:QUICK_ZOO_MODELS]
    p = {"source": source}
    grid = _grid(cfg)["hf"]
    return [_case(f"{source}/{n}", {**p, "model": n}, m, d, cfg) for n in names for m, d in grid]


# The modality of every model of a library zoo.
LIBRARY_MODALITY = {"timm": "vision", "diffusers": "diffusion"}


def cases(cfg: RunConfig) -> list[Case]:
    sources, modalities = _zoo(cfg)
    grid = _grid(cfg)
    out: list[Case] = []
    if "hf" in sources:
        out += _hf_cases(cfg, modalities)
    for source in ("timm", "diffusers"):
        if source in sources:
            out += _library_cases(source, cfg, modalities)
    if "synthetic" in sources:
        from trainready.models.synthetic import variants

        for name, config in variants(cfg.preset, SEED):
            p = {"source": "synthetic", "model": name, "config": config}
            out += [_case(f"synthetic/{name}", p, m, d, cfg) for m, d in grid["synthetic"]]
    for path in _list(cfg.options.get("models")):
        p = {"source": "factory", "model": path, "factory": path}
        out += [_case(f"custom/{path}", p, m, d, cfg) for m, d in grid["factory"]]
    return out


def declared_modality(p: dict[str, Any]) -> str:
    """The modality of a case's model from its params alone (for a model that did not build)."""
    source = p.get("source")
    if source in ("hf", "hf_task"):
        return hf_modality(str(p["model"]))
    if source in ("synthetic", "factory"):
        return "text-decoder"  # both feed token ids to a causal LM
    return str(p.get("modality") or LIBRARY_MODALITY.get(str(source), "unknown"))
