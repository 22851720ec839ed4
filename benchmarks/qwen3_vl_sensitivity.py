"""Sensitivity of the Qwen3-VL samples/s rows to the recipe facts and to one physics term the model
lacks: prints the median absolute error (all rows, Offline, Server) and the signed error per row of
``data/mlperf_non_llm_results.csv`` for the bundled model and for counterfactual variants.

    python benchmarks/qwen3_vl_sensitivity.py [--llm]

``--llm`` also validates the LLM rows (``data/mlperf_llm_results.csv``, one process) with the same
softmax roof applied to every attention operator (one exp per score element: 4·head_dim FLOPs per
exp for GQA, 2·(qk + v head dims) for MLA prefill, 2·(2·kv_lora + rope) for absorbed MLA decode)
and prints the summary against the bundled model (the hardware efficiencies are not refitted).

Variants (each changes one thing against the bundled model):

- ``round maturity``: the v6.0 preset's TensorRT-LLM maturity multipliers applied to the vLLM recipes.
- ``kv auto``: the Blackwell recipes' KV cache left 'auto' (fp8) instead of the checkpoint's bf16.
- ``encoder attention bf16``: the recipes' fp8 encoder attention (VLLM_MM_ENCODER_FP8_ATTN=1) ignored.
- ``overlap + disagg allowed``: the round's overlap and disaggregation offered to the vLLM recipes.
- ``softmax roof (prototype)``: the encoder's attention also bounded by the exponential unit, one
  exp per score element (head_dim 72: 288 FLOPs per exp), at the attention kernel's efficiency.
  Exponential rate = dense BF16 peak / 512 on Blackwell (16 MUFU.EX2 per clock per SM against
  8,192 dense BF16 FLOPs per clock per SM), / 256 on Blackwell Ultra (NVIDIA, "Making Softmax More
  Efficient with NVIDIA Blackwell Ultra": twice Blackwell's MUFU.EX2 throughput) and on Hopper
  (FlashAttention-3 paper: H100 SXM5 3.9 TFLOPS of special functions against 989 TFLOPS FP16).
  A prototype patched into the step pricing for this script only; the model does not price it.

The variants patch module functions in this process only; nothing is written.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from infersim import engine
from infersim.optimizations import presets as P
from infersim.workloads import validate as wv

DATA = Path(__file__).resolve().parent.parent / "data" / "mlperf_non_llm_results.csv"

EXP_PER_BF16_FLOP = {"NVIDIA B200 (HGX B200)": 1 / 512, "NVIDIA GB200 NVL72 (per GPU)": 1 / 512,
                     "NVIDIA B300 Blackwell Ultra (HGX B300)": 1 / 256, "NVIDIA GB300 NVL72 (per GPU)": 1 / 256,
                     "NVIDIA H200 SXM 141GB": 1 / 256, "NVIDIA H100 SXM5 80GB": 1 / 256}
"""Exponentials per second over dense BF16 FLOP/s, by hardware profile name (see the docstring)."""


def _flops_per_exp(model, name: str) -> float | None:
    """Attention FLOPs per softmax exponential of the operator ``name`` (None: not attention)."""
    if name == "vision_attention":
        v = model.vision_encoder
        return 4.0 * v.hidden_size / v.n_heads
    if not name.startswith("attention_"):
        return None
    att = model.attention
    if getattr(att, "kind", "") == "mla":
        if name.startswith("attention_decode"):
            return 2.0 * (2 * att.kv_lora_rank + att.qk_rope_head_dim)
        return 2.0 * (att.qk_nope_head_dim + att.qk_rope_head_dim + att.v_head_dim)
    return 4.0 * att.head_dim


def _softmax_roof(price, names=("vision_attention",)):
    """Step pricing with attention operators in ``names`` (prefixes) also bounded by the exp unit:
    their FLOPs are raised to the tensor-rate equivalent of their exponentials' time."""
    def priced(plan, graph, detail):
        ratio = EXP_PER_BF16_FLOP.get(plan.hardware.name)
        if ratio is None:
            return price(plan, graph, detail)
        exp_rate = plan.hardware.compute.flop_rate("bf16") * ratio
        ops = []
        for op in graph.ops:
            per_exp = _flops_per_exp(plan.model, op.name) if op.name.startswith(names) else None
            if per_exp:
                rate = plan.hardware.compute.flop_rate(op.precision)
                op = dataclasses.replace(op, flops=np.maximum(op.flops, np.asarray(op.flops) / per_exp * rate / exp_rate))
            ops.append(op)
        return price(plan, dataclasses.replace(graph, ops=tuple(ops)), detail)
    return priced


def _llm(price) -> None:
    from infersim.accuracy.runner import validate

    data = DATA.parent / "mlperf_llm_results.csv"
    for label, pricing in (("bundled model", price), ("softmax roof on all attention", _softmax_roof(price, ("attention_", "vision_attention")))):
        engine._price = pricing
        s = validate(data, workers=1).summary
        print(f"LLM rows, {label:30s} median {s['median_ape']:5.2f} %  p90 {s['p90_ape']:5.2f} %  "
              f"frontier median {s['frontier_median_ape']:5.2f} %  ({s['rows']} rows)")
    engine._price = price


def _run(label: str) -> list:
    rows, _ = wv.validate_metric_csv(DATA)
    q = [r for r in rows if r.model.startswith("qwen3-vl") and r.predicted is not None]
    med = lambda sc: statistics.median(abs(r.error_pct) for r in q if sc in (None, r.scenario))  # noqa: E731
    print(f"{label:34s} median {med(None):5.1f} %   offline {med('offline'):5.1f} %   server {med('server'):5.1f} %")
    return q


def main() -> int:
    t0 = time.perf_counter()
    maturity, recipe, price = P.PresetSpec.maturity_for, P.PresetSpec.recipe_for, engine._price

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
        ("softmax roof (prototype)", {"price": _softmax_roof(price)}),
    ]
    table = {}
    for label, patch in variants:
        P.PresetSpec.maturity_for = patch.get("maturity_for", maturity)
        P.PresetSpec.recipe_for = patch.get("recipe_for", recipe)
        engine._price = patch.get("price", price)
        table[label] = _run(label)
    P.PresetSpec.maturity_for, P.PresetSpec.recipe_for, engine._price = maturity, recipe, price
    print("\nsigned error per row, %:")
    first = table["bundled model"]
    print(f"{'row':32s}" + "".join(f"{label[:12]:>13s}" for label in table))
    for i, r in enumerate(first):
        name = f"{r.scenario[:3]} {r.hardware} {r.columns.get('submitter', '')[:8]}"
        print(f"{name:32s}" + "".join(f"{rows[i].error_pct:+13.1f}" for rows in table.values()))
    print(f"\n{len(variants)} variants in {time.perf_counter() - t0:.1f} s")
    if "--llm" in sys.argv[1:]:
        _llm(price)
    return 0


if __name__ == "__main__":
    sys.exit(main())
