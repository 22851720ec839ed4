"""Predict one MLPerf non-LLM operating point: samples/s, latency and where the time goes.

``predict(hardware, model, scenario, accelerators)`` resolves IDs or paths (or takes spec
objects), dispatches on the model's kind and returns a ``WorkloadPrediction`` whose ``to_dict``
is the JSON printed by ``infersim run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from ..errors import SpecError
from ..specs import catalog
from ..specs.hardware import HardwareSpec
from ..specs.workload_models import (DiffusionVideoModelSpec, GenerativeRecommenderSpec, NonLlmScenarioSpec,
                                     RecommendationWorkload, TextToVideoWorkload)
from ..units import BYTES_PER_ELEMENT
from . import diffusion, recsys
from .cost import KINDS, bound_name


@dataclass
class WorkloadPrediction:
    """One non-LLM operating point."""

    hardware: str
    model: str
    scenario: str
    accelerators: int
    feasible: bool
    reason: str = ""
    metrics: dict[str, float | None] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    breakdown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        m = self.metrics
        return {"hardware": self.hardware, "model": self.model, "scenario": self.scenario,
                "accelerators": self.accelerators, "feasible": self.feasible, "reason": self.reason,
                "metric": "samples_per_s", "samples_per_s": m.get("samples_per_s", 0.0),
                "samples_per_s_per_accelerator": m.get("samples_per_s_per_accelerator", 0.0),
                "latency_s": m.get("latency_s"), "latency_percentile": m.get("latency_percentile"),
                "latency_mean_s": m.get("latency_mean_s"),
                "usd_per_million_samples": m.get("usd_per_million_samples"),
                "tokens_per_s": None, "config": self.config, "breakdown": self.breakdown}


def is_workload_model(model) -> bool:
    """True for a spec (or the ID/path of a profile) of a model kind handled here."""
    if isinstance(model, (DiffusionVideoModelSpec, GenerativeRecommenderSpec)):
        return True
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        return isinstance(catalog.load("model", model), (DiffusionVideoModelSpec, GenerativeRecommenderSpec))
    return False


def _get(kind: str, x):
    if isinstance(x, (str, bytes)) or hasattr(x, "__fspath__"):
        return catalog.load(kind, x), catalog.profile_id(kind, x)
    return x, getattr(x, "name", kind)


def _default_accelerators(hw: HardwareSpec) -> int:
    d = hw.scale_up.domain_size
    return d if d <= 72 else 8


def _usd(hw: HardwareSpec, accelerators: int, samples_per_s: float) -> float | None:
    if samples_per_s <= 0:
        return None
    return hw.price.usd_per_hour * accelerators / 3600.0 / samples_per_s * 1e6


def _kinds(cost, i: int, shape) -> dict[str, float]:
    return {k: float(np.broadcast_to(np.asarray(cost.by_kind[k], float), shape)[i]) for k in KINDS}


def predict(hardware, model, scenario, accelerators: int | None = None, precision: str | None = None) -> WorkloadPrediction:
    """Best operating point of a non-LLM model on ``accelerators`` of ``hardware``.

    ``precision`` (text-to-video only): the transformer's compute precision in place of the
    scenario's (a submission that ran another recipe, e.g. bf16 instead of the reference FP8)."""
    hw, hw_id = _get("hardware", hardware)
    sc, sc_id = _get("scenario", scenario)
    md, md_id = _get("model", model if model is not None else getattr(sc, "model", None))
    if not isinstance(sc, NonLlmScenarioSpec):
        raise SpecError(f"model '{md_id}' is a {md.kind} model; scenario '{sc_id}' is an LLM scenario "
                        "(expected one with workload.kind text_to_video or recommendation)", path="--scenario")
    n = int(accelerators) if accelerators is not None else _default_accelerators(hw)
    if not 1 <= n <= 1_000_000:
        raise SpecError(f"--accelerators must be in [1, 1e6] (got {n})")
    base = WorkloadPrediction(hw_id, md_id, sc_id, n, False)
    if precision is not None:
        if not isinstance(md, DiffusionVideoModelSpec):
            raise SpecError(f"a precision override applies to text-to-video models only (model '{md_id}')")
        if precision not in BYTES_PER_ELEMENT:
            raise SpecError(f"unknown precision {precision!r} (one of {', '.join(BYTES_PER_ELEMENT)})")
        sc = sc.model_copy(update={"precision": precision})
    if isinstance(md, DiffusionVideoModelSpec):
        if not isinstance(sc.workload, TextToVideoWorkload):
            raise SpecError(f"scenario '{sc_id}' has workload.kind {sc.workload.kind}; model '{md_id}' needs text_to_video")
        if sc.kind == "server":
            raise SpecError(f"scenario kind 'server' is not supported for text-to-video (offline or singlestream)")
        return _predict_video(base, hw, md, sc, n)
    if not isinstance(sc.workload, RecommendationWorkload):
        raise SpecError(f"scenario '{sc_id}' has workload.kind {sc.workload.kind}; model '{md_id}' needs recommendation")
    if sc.kind == "singlestream":
        raise SpecError("scenario kind 'singlestream' is not supported for recommendation (offline or server)")
    return _predict_recsys(base, hw, md, sc, n)


def _predict_video(out: WorkloadPrediction, hw, md: DiffusionVideoModelSpec, sc: NonLlmScenarioSpec, n: int):
    wl = sc.workload
    u, c = diffusion.layouts(md, wl, n)
    mem = diffusion.memory_needed(md, wl, hw, sc.precision, u)
    fits = mem <= hw.memory.capacity_bytes
    if not fits.any():
        out.reason = (f"the video transformer does not fit: needs {float(mem.min()) / 2**30:.0f} GiB per accelerator, "
                      f"{hw.memory.hbm_capacity_gib:g} GiB available")
        return out
    vc = diffusion.video_cost(md, wl, hw, sc.precision, u, c)
    group = u * c
    replicas = np.floor(n / group)
    throughput = np.where(fits, replicas / vc.latency, 0.0)
    if sc.kind == "offline":
        i = int(np.argmax(throughput))
    else:  # singlestream: lowest latency
        i = int(np.argmin(np.where(fits, vc.latency, np.inf)))
    lat = float(vc.latency[i])
    sps = float(replicas[i] / lat) if sc.kind == "offline" else 1.0 / lat
    out.feasible = True
    out.metrics = {"samples_per_s": sps, "samples_per_s_per_accelerator": sps / n, "latency_s": lat,
                   "latency_percentile": sc.latency_percentile if sc.kind == "singlestream" else None,
                   "latency_mean_s": lat, "usd_per_million_samples": _usd(hw, n, sps)}
    shape = diffusion.video_shape(md, wl)
    out.config = {"ulysses": int(u[i]), "cfg": int(c[i]), "replicas": int(replicas[i]),
                  "precision": sc.precision, "latent_tokens": shape.tokens,
                  "transformer_forwards": wl.denoising_steps * wl.guidance_branches,
                  "memory_gib_per_accelerator": float(mem[i]) / 2**30}
    whole = vc.other
    kinds = _kinds(whole, i, u.shape)
    cb = float(np.broadcast_to(whole.compute_bound, u.shape)[i])
    mb = float(np.broadcast_to(whole.memory_bound, u.shape)[i])
    step = vc.step
    out.breakdown = {"video_s": lat, "stages_s": {k: float(np.broadcast_to(v, u.shape)[i]) for k, v in vc.stages.items()},
                     "transformer_forward_s": float(np.broadcast_to(step.total, u.shape)[i]),
                     "by_kind_s": kinds, "compute_bound_s": cb, "memory_bound_s": mb,
                     "bound": bound_name(kinds, cb, mb)}
    return out


def _predict_recsys(out: WorkloadPrediction, hw, md: GenerativeRecommenderSpec, sc: NonLlmScenarioSpec, n: int):
    wl = sc.workload
    B = recsys.BATCHES
    mem = recsys.memory_per_accelerator(md, wl, hw, B, n)
    fits = mem <= hw.memory.capacity_bytes
    if not fits.any():
        need = recsys.memory_per_accelerator(md, wl, hw, 1.0, n)
        out.reason = (f"the embedding tables do not fit: {float(need) / 2**30:.0f} GiB per accelerator on {n} accelerators, "
                      f"{hw.memory.hbm_capacity_gib:g} GiB available")
        return out
    cost = recsys.batch_cost(md, wl, hw, B, n)
    service = np.asarray(cost.total, float)
    per_acc = np.where(fits, B / service, 0.0)
    if sc.kind == "offline":
        i = int(np.argmax(per_acc))
        rate = per_acc[i]
        lat = float(service[i])
    else:
        z = NormalDist().inv_cdf(sc.slo.percentile / 100.0)
        tail = recsys.batch_cost(md, wl, hw, B + z * np.sqrt(B), n).total
        p99 = recsys.server_p99(service, np.asarray(tail, float))
        ok = (p99 <= sc.slo.latency_ms * 1e-3) & fits
        if not ok.any():
            out.reason = f"no batch meets the p{sc.slo.percentile:g} latency limit of {sc.slo.latency_ms:g} ms"
            return out
        i = int(np.argmax(np.where(ok, per_acc, -1.0)))
        rate = float(per_acc[i])
        lat = float(p99[i])
    sps = float(rate) * n
    shape = recsys.sequence_shape(md, wl)
    out.feasible = True
    out.metrics = {"samples_per_s": sps, "samples_per_s_per_accelerator": sps / n, "latency_s": lat,
                   "latency_percentile": sc.slo.percentile if sc.kind == "server" else None,
                   "latency_mean_s": None, "usd_per_million_samples": _usd(hw, n, sps)}
    out.config = {"batch_per_accelerator": int(B[i]), "precision": md.dense_precision,
                  "sequence_tokens": shape.tokens, "embedding_shards": n,
                  "memory_gib_per_accelerator": float(mem[i]) / 2**30}
    kinds = _kinds(cost, i, B.shape)
    cb = float(np.asarray(cost.compute_bound)[i])
    mb = float(np.asarray(cost.memory_bound)[i])
    out.breakdown = {"batch_s": float(service[i]), "per_sample_s": float(service[i] / B[i]), "by_kind_s": kinds,
                     "compute_bound_s": cb, "memory_bound_s": mb, "bound": bound_name(kinds, cb, mb)}
    return out
