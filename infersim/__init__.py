"""infersim: an analytical inference-performance simulator for large language models.

The public API (units are SI: seconds, tokens/s, US$)::

    import infersim
    pred = infersim.predict("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8)   # best operating point
    pred.to_dict()["tokens_per_s_per_accelerator"]
    results = infersim.evaluate(infersim.Query.build("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8))
    rows = infersim.explain(pred)                                         # per-operator step times
    infersim.explain_prompt(pred)["rows"]                                 # and one prompt token's
    infersim.load_curve("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8, points=5).rows   # latency against load

Heavy parts (validation, calibration, plots) load on first use, so ``import infersim`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "predict": ("api", "predict"),
    "evaluate": ("api", "evaluate"),
    "explain": ("api", "explain"),
    "explain_prompt": ("api", "explain_prompt"),
    "Prediction": ("api", "Prediction"),
    "Query": ("query", "Query"),
    "Inputs": ("query", "Inputs"),
    "load_inputs": ("query", "load_inputs"),
    "Result": ("grid", "Result"),
    "load_profile": ("specs.catalog", "load"),
    "list_profiles": ("specs.catalog", "list_ids"),
    "validate": ("accuracy", "validate"),
    "calibrate": ("accuracy", "calibrate"),
    "waterfall": ("ablation", "waterfall"),
    "frontier_points": ("pareto", "frontier_points"),
    "load_curve": ("curve", "curve"),
    "SpecError": ("errors", "SpecError"),
    "InfeasibleError": ("errors", "InfeasibleError"),
    "Reason": ("errors", "Reason"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    """Resolve a public name on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'infersim' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
