"""Sensitivity of the Qwen3-VL samples/s rows to the recipe facts and to the softmax exponential
roof: prints the median absolute error (all rows, Offline, Server) and the signed error per row of
``data/mlperf_non_llm_results.csv`` for the bundled model and for counterfactual variants.

    python benchmarks/qwen3_vl_sensitivity.py [--llm]

``--llm`` also validates the LLM rows (``data/mlperf_llm_results.csv``, one process) with and
without the exponential roof and prints both summaries (the hardware efficiencies are not refitted).

Variants (each changes one thing against the bundled model):

- ``round maturity``: the v6.0 preset's TensorRT-LLM maturity multipliers applied to the vLLM recipes.
- ``kv auto``: the Blackwell recipes' KV cache left 'auto' (fp8) instead of the checkpoint's bf16.
- ``encoder attention bf16``: the recipes' fp8 encoder attention (VLLM_MM_ENCODER_FP8_ATTN=1) ignored.
- ``overlap + disagg allowed``: the round's overlap and disaggregation offered to the vLLM recipes.
- ``no softmax roof``: the hardware profiles' exponential rate (``compute.exp_rate_tera_per_s``)
  ignored, so attention is bounded by tensor FLOPs and memory only (the encoder's head_dim 72 takes
  288 FLOPs per exp, which on Blackwell makes its attention exponential-bound in fp8 and bf16).

The variants patch class attributes in this process only; nothing is written.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

from infersim.optimizations import presets as P
from infersim.specs.hardware import ComputeSpec
from infersim.workloads import validate as wv

DATA = Path(__file__).resolve().parent.parent / "data" / "mlperf_non_llm_results.csv"

NO_EXP_ROOF = property(lambda self: None)
"""Replaces ``ComputeSpec.exp_rate`` to price attention without the exponential roof."""


def _llm(exp_rate) -> None:
    from infersim.accuracy.runner import validate

    data = DATA.parent / "mlperf_llm_results.csv"
    for label, rate in (("bundled model", exp_rate), ("no softmax roof", NO_EXP_ROOF)):
        ComputeSpec.exp_rate = rate
        s = validate(data, workers=1).summary
        print(f"LLM rows, {label:30s} median {s['median_ape']:5.2f} %  p90 {s['p90_ape']:5.2f} %  "
              f"frontier median {s['frontier_median_ape']:5.2f} %  ({s['rows']} rows)")
    ComputeSpec.exp_rate = exp_rate


def _run(label: str) -> list:
    rows, _ = wv.validate_metric_csv(DATA)
    q = [r for r in rows if r.model.startswith("qwen3-vl") and r.predicted is not None]
    med = lambda sc: statistics.median(abs(r.error_pct) for r in q if sc in (None, r.scenario))  # noqa: E731
    print(f"{label:34s} median {med(None):5.1f} %   offline {med('offline'):5.1f} %   server {med('server'):5.1f} %")
    return q


def main() -> int:
    t0 = time.perf_counter()
    maturity, recipe, exp_rate = P.PresetSpec.maturity_for, P.PresetSpec.recipe_for, ComputeSpec.exp_rate

    def recipe_with(**changes):
        def patched(self, *a):
            r = recipe(self, *a)
            return dataclasses.replace(r, **{k: v for k, v in changes.items() if getattr(r, k) is not None or k == "disable"})
        return patched

    variants = [
        ("bundled model", {}),
        ("round maturity", {"maturity_for": lambda self, r: (self.kernel_efficiency, self.moe_kernel_efficiency,
                                                             self.host_overhead_scale)}),
        ("kv auto", {"recipe_for": recipe_with(kv_cache=None)}),
        ("encoder attention bf16", {"recipe_for": recipe_with(vision_attention=None)}),
        ("overlap + disagg allowed", {"recipe_for": recipe_with(disable=())}),
        ("no softmax roof", {"exp_rate": NO_EXP_ROOF}),
    ]
    table = {}
    for label, patch in variants:
        P.PresetSpec.maturity_for = patch.get("maturity_for", maturity)
        P.PresetSpec.recipe_for = patch.get("recipe_for", recipe)
        ComputeSpec.exp_rate = patch.get("exp_rate", exp_rate)
        table[label] = _run(label)
    P.PresetSpec.maturity_for, P.PresetSpec.recipe_for, ComputeSpec.exp_rate = maturity, recipe, exp_rate
    print("\nsigned error per row, %:")
    first = table["bundled model"]
    print(f"{'row':32s}" + "".join(f"{label[:12]:>13s}" for label in table))
    for i, r in enumerate(first):
        name = f"{r.scenario[:3]} {r.hardware} {r.columns.get('submitter', '')[:8]}"
        print(f"{name:32s}" + "".join(f"{rows[i].error_pct:+13.1f}" for rows in table.values()))
    print(f"\n{len(variants)} variants in {time.perf_counter() - t0:.1f} s")
    if "--llm" in sys.argv[1:]:
        _llm(exp_rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
