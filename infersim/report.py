"""Rendering: predictions, breakdowns and per-operator tables as rich tables or JSON.

Pure formatting of results computed elsewhere; units converted to ms / GB here at the boundary.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.table import Table
from rich.text import Text

from .files import write_atomic


def _num(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return "–"
        return f"{v:,.{digits}f}"
    return str(v)


def kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("quantity", no_wrap=True)
    t.add_column("value")
    for k, v in rows:
        t.add_row(Text(k), Text(v))
    return t


def _formats(c: dict) -> str:
    """The formats line: a mixed-precision checkpoint lists its formats' shares of the weights,
    largest first, each layer's activations in its own format."""
    mix = c.get("weight_mix")
    if mix:
        parts = " + ".join(f"{p} {100 * share:.0f} %" for p, share in sorted(mix.items(), key=lambda ps: -ps[1]))
        return f"weights {parts} of the layers (activations to match) · KV {c['kv_cache']}"
    return f"weights {c['weights']} · activations {c['activations']} · KV {c['kv_cache']}"


DISPATCH_TEXT = {"random": "random (each to a random instance)", "round_robin": "round robin (dealt in turn)",
                 "load_balancing": "load balancing (to the fewest in flight)",
                 "fewest_tokens": "fewest tokens (to the fewest prompt tokens waiting)"}
"""How ``config.dispatch`` reads in the table."""


def percentile_label(limits: dict[str, Any] | None) -> str:
    """'p99' (or the limits' own percentile) for table headings of the latency figures."""
    return f"p{limits['percentile']:g}" if limits else "p99"


def limits_text(limits: dict[str, Any]) -> str:
    """'p99: TTFT ≤ 1,000 ms · TPOT ≤ 50 ms' from ``Prediction.to_dict()['limits']``."""
    parts = [f"{name} ≤ {limits[key]:,.4g} ms" for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"),
                                                                  ("E2E", "e2e_ms")) if limits.get(key) is not None]
    return f"p{limits['percentile']:g}: " + " · ".join(parts)


def limits_suffix(limits: dict[str, Any] | None) -> str:
    """' · latency limits p99: TTFT ≤ …' for a table title ('' without limits, Offline)."""
    return f" · latency limits {limits_text(limits)}" if limits else ""


def prediction_tables(d: dict[str, Any]) -> list[Table]:
    """Tables for ``Prediction.to_dict()``: headline, configuration, time breakdown."""
    c = d["config"]
    pct = percentile_label(d.get("limits"))
    head = [
        ("system", f"{d['hardware']} × {d['accelerators']}  ·  {d['model']}  ·  {d['scenario']}  ·  round {c.get('round')}"),
        ("output tokens/s (system)", _num(d["tokens_per_s"], 0)),
        ("tokens/s per accelerator", _num(d["tokens_per_s_per_accelerator"], 1)),
        ("tokens/s per user", _num(d["tokens_per_s_per_user"], 1)),
        (f"TTFT {pct} / mean", f"{_num(d['ttft_s'] * 1e3, 1)} / {_num(d['ttft_mean_s'] * 1e3, 1)} ms"),
        (f"TPOT {pct} / mean", f"{_num(d['tpot_s'] * 1e3, 2)} / {_num(d['tpot_mean_s'] * 1e3, 2)} ms"),
        *([("latency limits", limits_text(d["limits"]))] if d.get("limits") else []),
        ("requests/s", _num(d["requests_per_s"], 2)),
        ("$ per M output tokens", f"{_num(d['usd_per_million_tokens'], 3)}"),
        ("$ per M input tokens", f"{_num(d['usd_per_million_input_tokens'], 3)}"),
    ]
    def lay(x: dict) -> str:
        return f"tp {x['tp']} · pp {x['pp']} · ep {x['ep']} · attention-dp {x['dp']}"

    size = c["tp"] * c["pp"]
    idle = c.get("idle_accelerators") or 0
    if c.get("disaggregated") and "prefill_layout" in c:
        p = c["prefill_layout"]
        pools = [("decode workers", f"{c['decode_workers']} × {size} accelerators, {lay(c)}"),
                 ("prefill workers", f"{c['prefill_workers']} × {p['tp'] * p['pp']} accelerators, {lay(p)}"),
                 ("KV transfer", f"over the {c.get('kv_transfer_tier', '?')} network")]
    else:
        pools = [("layout per instance", lay(c)), ("instances", f"{c['replicas']} × {size} accelerators")]
        if c["replicas"] > 1 and c.get("dispatch"):
            pools.append(("requests to instances", DISPATCH_TEXT.get(c["dispatch"], c["dispatch"])))
    if idle:
        pools.append(("idle accelerators", f"{idle} (no layout uses them profitably)"))
    at_load = c.get("qps") is not None and d.get("occupancy") is not None
    conf = [
        *pools,
        ("batch (sequences per instance)" + (" at capacity" if at_load else ""),
         f"{_num(c['batch'], 0)} (memory allows {_num(c['max_batch'], 0)})"),
        ("formats", _formats(c)),
        ("optimizations", ", ".join(c["optimizations"]) or "none"),
    ]
    if c.get("cuda_graphs"):
        conf.append(("CUDA graphs", c["cuda_graphs"]))
    if c.get("mtp_depth"):
        conf.append(("MTP", f"depth {c['mtp_depth']}, {c['tokens_per_step']:.2f} tokens per step"))
    for kind, why in (d.get("skipped") or {}).items():
        conf.append((f"not used: {kind}", why))
    b = d["breakdown"]
    step = b["step_s"]
    where = " at capacity" if at_load else ""
    bt = Table(title=f"decode step{where} {step * 1e3:.2f} ms — bound: {b['bound']}", title_justify="left")
    for col in ("part", "ms", "share"):
        bt.add_column(col, justify="left" if col == "part" else "right")
    for k, v in b["by_kind_s"].items():
        bt.add_row(k, f"{v * 1e3:.3f}", f"{v / step:.1%}" if step else "–")
    bt.add_row("of compute ops: compute-bound", f"{b['compute_bound_s'] * 1e3:.3f}", f"{b['compute_bound_s'] / step:.1%}")
    bt.add_row("of compute ops: memory-bound", f"{b['memory_bound_s'] * 1e3:.3f}", f"{b['memory_bound_s'] / step:.1%}")
    if b.get("prefill_share"):
        bt.add_row("engine time on context iterations", "", f"{b['prefill_share']:.1%}")
    if b.get("host_s"):  # outside the step: the share is of the whole iteration
        bt.add_row("+ host, Python executor's responses (per iteration)", f"{b['host_s'] * 1e3:.3f}",
                   f"{b['host_s'] / (step + b['host_s']):.1%} of step + host")
    tables = [kv_table("prediction", head)]
    if at_load:  # the same configuration at the offered load: what the headline figures are
        n_inst = c.get("decode_workers") or c.get("replicas") or 1
        load = [
            ("offered load", f"{_num(c['qps'], 2)} requests/s"),
            ("occupancy (system / per instance)", f"{_num(d['occupancy'], 0)} / {_num(d['occupancy'] / n_inst, 1)} sequences"),
            ("iteration (mean / decode-only)", f"{_num(d['iteration_s'] * 1e3, 2)} / {_num(d['decode_iteration_s'] * 1e3, 2)} ms"),
            ("TTFT p50 / TPOT p50", f"{_num(d['ttft_p50_s'] * 1e3, 1)} / {_num(d['tpot_p50_s'] * 1e3, 2)} ms"),
            ("capacity (tokens/s, system)", f"{_num(d['capacity_tokens_per_s'], 0)}"
             f" ({d['tokens_per_s'] / d['capacity_tokens_per_s']:.0%} used)" if d.get("capacity_tokens_per_s") else "–"),
            ("completed tokens/s (LoadGen)", _num(d.get("completed_tokens_per_s"), 0)),
        ]
        tables.append(kv_table("at this load", load))
    return [*tables, kv_table("configuration", conf), bt]


def _operator_table(title: str, rows: list[dict[str, Any]], unit: str, per_second: float) -> Table:
    """Per-operator rows (op, kind, bound, time_s, share) with their times in ``unit``."""
    t = Table(title=title, title_justify="left")
    for col, just in (("op", "left"), ("kind", "left"), ("bound", "left"), (unit, "right"), ("share", "right")):
        t.add_column(col, justify=just)
    for r in rows:
        t.add_row(r["op"], r["kind"], r["bound"], f"{r['time_s'] * per_second:.3f}", f"{r['share']:.1%}")
    return t


def explain_table(rows: list[dict[str, Any]]) -> Table:
    return _operator_table("per-operator time of one decode step (one instance)", rows, "ms", 1e3)


def explain_prompt_table(e: dict[str, Any]) -> Table:
    """``api.explain_prompt``: what one prompt token costs, by operator (µs per token)."""
    lay = e["layout"]
    where = ("alone on a prefill worker" if e["where"] == "prefill worker" else "beside the decode step") + \
        f", tp {lay['tp']} · pp {lay['pp']} · ep {lay['ep']} · dp {lay['dp']}"
    return _operator_table(f"per-operator time of one prompt token ({_num(e['seconds_per_token'] * 1e6, 2)} µs; one mean "
                           f"prompt of {_num(e['prompt_tokens'], 0)} tokens {where}: {e['prompt_s'] * 1e3:.1f} ms)",
                           e["rows"], "µs", 1e6)


def to_json(obj: Any) -> str:
    """JSON with non-finite floats written as null (strict JSON)."""
    def clean(x):
        if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if hasattr(x, "item"):
            return clean(x.item())
        return x

    return json.dumps(clean(obj), indent=2)


__all__ = ["kv_table", "prediction_tables", "explain_table", "explain_prompt_table", "to_json", "write_atomic", "save_figure"]


def save_figure(fig, path, fmt: str = "png"):
    """Render a matplotlib figure to ``path`` in ``fmt``, atomically, and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


def runners_up_table(rows: list[dict[str, Any]], limits: dict[str, Any] | None = None) -> Table:
    """``runners_up.runners_up`` rows: the pick and the next configurations by tokens/s per accelerator
    (``limits``: the prediction's, for the latency columns' percentile)."""
    t = Table(title="configurations by tokens/s per accelerator (rank 0: the pick; others at their best batch on the search's axis)",
              title_justify="left")
    pct = percentile_label(limits)
    for col, just in (("#", "right"), ("layout per instance", "left"), ("instances", "right"), ("optimizations", "left"),
                      ("batch", "right"), ("tokens/s/acc", "right"), ("× pick", "right"), (f"TTFT {pct} ms", "right"),
                      (f"TPOT {pct} ms", "right"), ("stops at", "left")):
        t.add_column(col, justify=just)
    for r in rows:
        lay = f"tp {r['tp']} · pp {r['pp']} · ep {r['ep']} · dp {r['dp']}" + (" (decode)" if r["disaggregated"] else "")
        t.add_row(str(r["rank"]), lay, str(r["replicas"]), ", ".join(r["optimizations"]) or "none", _num(r["batch"], 0),
                  _num(r["tokens_per_s_per_accelerator"], 1), f"{r['of_pick']:.3f}", _num(r["ttft_s"] * 1e3, 1),
                  _num(r["tpot_s"] * 1e3, 2), r["stops_at"])
    return t
