"""Each published run's own engine settings and layout (``data/mlperf_engine_settings.csv``).

The settings are inputs the submitter wrote in the run's config files (batch cap, token budget,
chunking, attention-DP gate, CUDA graphs, stream interval, TP/PP/EP), never its measured results.
``infersim validate --at-load --run-engine`` predicts each run with them, and ``infersim calibrate``
fits the operating points on them (``accuracy.oppoints.load_op_rows``). No import from the rest of
the package at module level: both read it.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any


def _num(text) -> float | None:
    """A positive finite number, else None (blank, text, zero or negative)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def engine_settings_data() -> Path:
    """``data/mlperf_engine_settings.csv`` (copy of shared/reference/mlperf_engine_settings.csv:
    each MLPerf LLM run's engine settings read from its submission's config files)."""
    from .specs.catalog import bundled_root

    return bundled_root() / "data" / "mlperf_engine_settings.csv"


RUN_KEY = ("version", "submitter", "system", "benchmark", "scenario")
"""Columns that identify a run in the engine-settings and operating-point files."""

RUN_FIELDS = ("max_batch_size", "max_num_tokens", "enable_chunked_prefill", "enable_attention_dp", "adp_timeout_iters",
              "adp_batching_wait_iters", "cuda_graphs", "cuda_graph_batch_sizes", "stream_interval", "extra",
              "tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size", "harness", "scenario",
              "traffic_distribution_policy")
"""The columns ``run_engine`` and ``run_layout`` read."""


def run_fields(settings: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    """A run's ``RUN_FIELDS`` that are filled, as a hashable tuple (empty for None)."""
    if not settings:
        return ()
    return tuple((k, settings[k].strip()) for k in RUN_FIELDS if (settings.get(k) or "").strip())


RECORD_ONLY = frozenset(RUN_KEY) | {"total_accelerators", "framework", "config_variant", "config_match",
                                    "log_target_qps", "user_conf_target_qps", "source_repo", "source_path"}
"""Columns that identify a run or say where its config was looked for, not what the config set."""


def records_settings(row: dict[str, str]) -> bool:
    """Whether an engine-settings row records anything the run's config set (its harness, serving mode,
    layout, limits, ...): the reference file keeps a row for every run, with ``config_match`` "none
    found" and nothing else where no config was read."""
    return any((v or "").strip() for k, v in row.items() if k is not None and k not in RECORD_ONLY)


def load_engine_settings(path=None) -> dict[tuple, dict[str, str]]:
    """Engine settings per run, keyed by ``RUN_KEY`` (empty where the file is absent); a run whose row
    records no setting (``records_settings``) is left out, so it counts as a run without its own
    settings everywhere (``validate --at-load --run-engine``'s ``run_engine``, the operating points'
    ``OpRow.run``)."""
    path = Path(path) if path is not None else engine_settings_data()
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return {tuple(r.get(k, "").strip() for k in RUN_KEY): r for r in csv.DictReader(fh) if records_settings(r)}


def _graph_sizes(text: str):
    """An explicit list of captured sizes ("128 256 384 512"); None for summaries and blanks."""
    parts = text.split()
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return tuple(sorted(int(p) for p in parts))


def run_dispatch(settings: dict[str, str]) -> str | None:
    """How the run's harness handed requests to its instances (``plan.Engine.instance_dispatch``):
    its recorded ``traffic_distribution_policy`` (``isl_load_balancing``, the instance with the
    fewest pending input tokens: "fewest_tokens"), else its harness's default: the NVIDIA
    harness balances Server load (the instance with the fewest requests in flight) and deals
    Offline and Interactive requests in turn (shared/reference/mlperf_submission_configs.md, v6.0
    ``closed/NVIDIA/code/llmlib/config.py`` and ``factory.py``); the AMD harness sends each to the
    shortest queue (v5.1 ``closed/AMD/code/*/harness_llm/backends/common/server_sut.py``
    ``shortest_queue``). None for other harnesses (the preset's)."""
    policy = settings.get("traffic_distribution_policy", "").strip().lower()
    if policy == "isl_load_balancing":
        return "fewest_tokens"
    if policy == "load_balancing":
        return "load_balancing"
    if policy == "round_robin":
        return "round_robin"
    harness = settings.get("harness", "").strip().lower()
    if harness.startswith("nvidia harness (trt-llm)"):
        return "load_balancing" if settings.get("scenario", "").strip().lower() == "server" else "round_robin"
    if harness.startswith("amd harness"):
        return "load_balancing"
    return None


def run_engine(engine, settings: dict[str, str]):
    """``engine`` (the round preset's) with the run's own settings where its config gives them:
    batch cap (``max_batch_size``: TensorRT-LLM per attention rank, vLLM ``max_num_seqs``), token
    budget (``max_num_tokens`` / ``max_num_batched_tokens``), chunked prefill, the attention-DP gate
    (only where the run enabled attention DP), CUDA graphs (explicit sizes; ``cuda_graphs`` False: none,
    True without sizes: every size), ``stream_interval``,
    vLLM's ``num_scheduler_steps`` (``extra`` column) and the harness's request dispatch to the
    instances (``run_dispatch``).
    Inputs of the run, never its measured results."""
    from dataclasses import replace

    num = lambda k: _num(settings.get(k))  # noqa: E731
    kw: dict[str, Any] = {}
    if num("max_batch_size"):
        kw["max_batch_size"] = num("max_batch_size")
    if num("max_num_tokens"):
        kw["max_num_tokens"] = num("max_num_tokens")
    chunk = settings.get("enable_chunked_prefill", "").strip().lower()
    if chunk in ("true", "false"):
        kw["chunked_prefill"] = chunk == "true"
    adp = settings.get("enable_attention_dp", "").strip().lower()
    if adp == "false":
        kw.update(gate_timeout_iters=0, gate_wait_iters=0)
    elif adp == "true":
        kw.update(gate_timeout_iters=int(num("adp_timeout_iters") or 0), gate_wait_iters=int(num("adp_batching_wait_iters") or 0))
    sizes = _graph_sizes(settings.get("cuda_graph_batch_sizes", ""))
    graphs = settings.get("cuda_graphs", "").strip().lower()
    if sizes or graphs.startswith("true"):  # on without recorded sizes: the stack's default, every size
        kw["graph_sizes"] = sizes or None
    elif graphs == "false":  # an engine without CUDA graphs: every iteration launches its kernels
        kw["graph_sizes"] = ()
    if graphs.startswith("true"):  # piecewise graphs (vLLM V1 FULL_AND_PIECEWISE, TensorRT-LLM
        # torch_compile piecewise) also run the iterations that carry prompt tokens
        kw["graphs_capture_prompts"] = "piecewise" in graphs or "piecewise" in settings.get("extra", "").lower()
    if num("stream_interval"):
        kw["stream_interval"] = int(num("stream_interval"))
    dispatch = run_dispatch(settings)
    if dispatch is not None:
        kw["instance_dispatch"] = dispatch
    steps = re.search(r"(?:^|;)\s*num_scheduler_steps=(\d+)", settings.get("extra", ""))
    if steps:  # vLLM V0 multi-step scheduling (the AMD v5.1 configs, recorded in ``extra``)
        kw["decode_steps"] = int(steps.group(1))
    return replace(engine, **kw)


def recorded_layout(settings: dict[str, str], moe: bool) -> tuple[int, int, int, int] | None:
    """(tp, pp, ep, dp) a run's config records: ``tensor_parallel_size``, ``pipeline_parallel_size``
    (default 1), ``moe_expert_parallel_size`` (required for MoE models, 1 for dense ones), attention
    DP over the TP ranks where ``enable_attention_dp``. None where a field is missing or a dense
    model records expert parallelism."""
    tp, pp, ep = (_num(settings.get(k)) for k in ("tensor_parallel_size", "pipeline_parallel_size",
                                                   "moe_expert_parallel_size"))
    if tp is None or (moe and ep is None):
        return None
    ep = ep or 1.0
    if not moe and ep != 1.0:
        return None
    dp = tp if settings.get("enable_attention_dp", "").strip().lower() == "true" else 1.0
    return int(tp), int(pp or 1.0), int(ep), int(dp)


def run_layout(plan, settings: dict[str, str], stats, accelerators: int) -> dict[str, Any] | None:
    """The run's own instance layout where its config gives it: ``tensor_parallel_size``,
    ``pipeline_parallel_size`` (default 1), ``moe_expert_parallel_size`` (required for MoE models,
    1 for dense ones), attention DP over the TP ranks where ``enable_attention_dp``; replicas =
    accelerators // (tp·pp) and the layout's KV capacity. None where a field is missing or the
    layout does not fit the model (``parallel.layout_feasibility``) or the accelerators."""
    import numpy as np

    from . import parallel
    from .graph import Layout

    own = recorded_layout(settings, plan.model.moe is not None)
    if own is None:
        return None
    tp, pp, ep, dp = own
    replicas = accelerators // (tp * pp)
    lay = Layout(tp=tp, pp=pp, ep=ep, dp=dp)
    ok, _ = parallel.layout_feasibility(plan.model, lay, accelerators)
    if replicas < 1 or not bool(np.all(ok)):
        return None
    # KV capacity: activations of one iteration at the token budget (else at the capacity itself)
    q = 1.0 + plan.serving.draft_depth
    step = (plan.engine.max_num_tokens * dp if plan.engine.max_num_tokens is not None
            else parallel.max_batch(plan, lay, stats.context_mean, 0.0) * q * (1 + stats.isl_mean / stats.osl_mean))
    b_max = float(np.ravel(parallel.max_batch(plan, lay, stats.context_mean, step))[0])
    if not b_max > 0:
        return None
    return {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "replicas": replicas, "max_batch": b_max}


def apply_run(plan, settings: dict[str, str], stats, accelerators: int):
    """(``plan`` with the run's own engine settings (``run_engine``), the run's own layout on that
    plan (``run_layout``) or None): how ``validate --at-load --run-engine`` and the fit's
    operating points price a run."""
    from dataclasses import replace

    plan = replace(plan, engine=run_engine(plan.engine, settings))
    return plan, run_layout(plan, settings, stats, accelerators)


def _lead_int(text) -> int | None:
    """The leading whole number of a field such as "100 (gen) / 30 (ctx)"; None without one."""
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


DISAGG_FIELDS = ("disagg_prefill_workers", "disagg_prefill_tp", "disagg_decode_workers", "disagg_decode_tp")
"""The columns a disaggregated run needs for its own pools (``run_disagg``)."""


def run_disagg(plan, settings: dict[str, str], stats, accelerators: int):
    """(``plan`` with the run's decode workers' engine, its deployment) for a disaggregated run whose
    config gives both pools (``disagg_{prefill,decode}_{workers,tp,ep,adp}``), else None.

    The decode workers' engine: ``disagg_decode_max_batch_size`` / ``_max_num_tokens``, CUDA graphs
    of every size up to ``disagg_decode_cuda_graph_max_bs`` (the runs' lists run 1 … that size), the
    leading number of ``stream_interval`` (the generation workers'); the prefill workers batch
    ``disagg_prefill_max_num_tokens`` prompt tokens per step. The deployment: ``decode`` /
    ``prefill`` layouts (ep 1 where blank, attention DP over the TP ranks where ``_adp``), worker
    counts, and ``max_batch``, a decode worker's KV capacity. Inputs of the run, never its results."""
    from dataclasses import replace

    import numpy as np

    from . import parallel
    from .graph import Layout

    if any(_num(settings.get(k)) is None for k in DISAGG_FIELDS):
        return None

    def layout(pool: str) -> Layout:
        tp = int(_num(settings.get(f"disagg_{pool}_tp")))
        ep = int(_num(settings.get(f"disagg_{pool}_ep")) or 1)
        dp = tp if settings.get(f"disagg_{pool}_adp", "").strip().lower() == "true" else 1
        return Layout(tp=tp, pp=1, ep=ep, dp=dp)

    dec, pre = layout("decode"), layout("prefill")
    d_n, p_n = int(_num(settings["disagg_decode_workers"])), int(_num(settings["disagg_prefill_workers"]))
    if d_n * dec.tp + p_n * pre.tp > accelerators:
        return None
    for lay in (dec, pre):
        if not bool(np.all(parallel.layout_feasibility(plan.model, lay, accelerators)[0])):
            return None
    kw: dict[str, Any] = {}
    num = lambda k: _num(settings.get(k))  # noqa: E731
    if num("disagg_decode_max_batch_size"):
        kw["max_batch_size"] = num("disagg_decode_max_batch_size")
    if num("disagg_decode_max_num_tokens"):
        kw["max_num_tokens"] = num("disagg_decode_max_num_tokens")
    top, cap = num("disagg_decode_cuda_graph_max_bs"), kw.get("max_batch_size")
    if top:  # captured up to ``top`` (every size: the lists are dense, 1 … top); eager above it
        kw["graph_sizes"] = None if cap is not None and top >= cap else tuple(range(1, int(top) + 1))
    if _lead_int(settings.get("stream_interval")):
        kw["stream_interval"] = _lead_int(settings.get("stream_interval"))
    plan = replace(plan, engine=replace(plan.engine, **kw))
    if num("disagg_prefill_max_num_tokens"):
        plan = replace(plan, serving=replace(plan.serving, prefill_chunk_tokens=num("disagg_prefill_max_num_tokens")))
    q = 1.0 + plan.serving.draft_depth
    cap = plan.engine.max_batch_size or parallel.max_batch(plan, dec, stats.context_mean, 0.0)
    b_max = float(np.ravel(parallel.max_batch(plan, dec, stats.context_mean, float(np.ravel(cap)[0]) * q))[0])
    if not b_max > 0:
        return None
    return plan, {"decode": dec, "decode_workers": d_n, "prefill": pre, "prefill_workers": p_n, "max_batch": b_max}


__all__ = ["RUN_KEY", "RUN_FIELDS", "RECORD_ONLY", "records_settings", "run_fields", "recorded_layout", "engine_settings_data", "load_engine_settings", "run_engine", "run_layout",
           "apply_run", "run_disagg", "DISAGG_FIELDS"]
