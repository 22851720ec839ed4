"""Per-round software presets: which optimizations an MLPerf round's software had, and its maturity.

A preset is YAML data (``presets/vX.Y.yaml``): ``optimizations`` are applied; ``choices`` are
available but used only where the search finds they help (e.g. MTP, disaggregation);
``kernel_efficiency`` and ``host_overhead_scale`` are the round's two maturity parameters, the
only per-round free parameters, fitted by ``infersim calibrate``. A round without a preset uses
the nearest earlier one; a round later than all presets uses the latest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields as dataclass_fields
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator, model_validator

from ..errors import SpecError
from ..specs._base import Spec, load_spec
from ..specs import catalog
from ..specs.catalog import bundled_root
from ..specs.hardware import CalibrationRecord, Precision

Dispatch = Literal["random", "round_robin", "load_balancing", "fewest_tokens"]
"""How a front end hands arriving requests to the instances (``plan.Engine.instance_dispatch``):
each to a random instance, dealt in turn, to the instance with the fewest requests in flight, or to
the one with the fewest prompt tokens waiting."""
DISPATCH_POLICIES: tuple[str, ...] = get_args(Dispatch)
"""``Dispatch``'s values, in order (``--dispatch`` and the presets' ``instance_dispatch``)."""


class Stack(StrEnum):
    """Serving software stack a recipe runs."""

    TENSORRT_LLM = "tensorrt-llm"
    VLLM = "vllm"
    SGLANG = "sglang"


StackName = Literal["tensorrt-llm", "vllm", "sglang"]
"""A ``Stack`` value as written in YAML (specs validate strictly, so the field takes the literal)."""
MoeBackend = Literal["CUTLASS", "WIDEEP", "CUTEDSL", "TRTLLM", "TRT_PLUGIN"]
"""TensorRT-LLM routed-expert backends named in the published runs (mlperf_engine_settings.csv
``moe_backend``), and TRT_PLUGIN: the MoE plugin of a built TensorRT engine (the C++ executor's
runs, which name no backend)."""


FUSABLE_ELEMENTWISE = ("rope", "qk_norm", "rope_latent_norm", "mlp_act", "experts_act", "input_norm", "post_attn_norm",
                       "residual_add", "embedding", "final_norm", "sampling")
"""Names of the graph's fusable elementwise ops (``graph.elementwise``), for ``fused_elementwise``."""


class EngineFields(Spec):
    """Engine settings; every field optional so a block can override only some of them."""

    max_batch_size: int | None = Field(default=None, ge=1, le=1_000_000)
    """Sequences in flight per attention rank (TRT-LLM ``gpu_batch_size``, vLLM ``max_num_seqs``)."""
    max_num_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    """Tokens per iteration per attention rank (TRT-LLM runtime ``max_num_tokens``, vLLM
    ``max_num_batched_tokens``)."""
    chunked_prefill: bool | None = None
    """Prompts may be split across iterations (TRT-LLM ``enable_chunked_context``)."""
    adp_timeout_iters: int | None = Field(default=None, ge=0, le=10_000)
    """Attention-DP admission gate timeout, iterations (0: gate off)."""
    adp_batching_wait_iters: int | None = Field(default=None, ge=0, le=10_000)
    """Attention-DP admission gate extra wait once every rank has a prompt, iterations."""
    num_scheduler_steps: int | None = Field(default=None, ge=1, le=64)
    """vLLM V0 multi-step scheduling: decode iterations per scheduler call; prompts are admitted
    only at a call (``plan.Engine.decode_steps``; 1 or unset: every iteration)."""
    cuda_graph_batch_sizes: list[Annotated[int, Field(ge=1, le=1_000_000)]] | None = None
    """Captured per-rank decode batch sizes (empty list: no graphs; absent: every size)."""
    graphs_capture_prompts: bool | None = None
    """The captured graphs also run iterations that carry prompt tokens (vLLM V1's default
    FULL_AND_PIECEWISE mode runs mixed batches as piecewise graphs); unset/false: only decode-only
    iterations replay a graph (TensorRT-LLM's decode CUDA graphs, SGLang, vLLM V0)."""
    stream_interval: int | None = Field(default=None, ge=1, le=100_000)
    """Output tokens per streamed chunk."""
    moe_backend: MoeBackend | None = None
    """Routed-expert kernel backend (TensorRT-LLM ``moe_backend``). Where it is not the round's own
    (``PresetSpec.moe_backend``) the run uses an earlier round's MoE kernels: see
    ``PresetSpec.maturity_for``."""
    python_executor: bool | None = None
    """The engine's executor loop runs in Python (TensorRT-LLM PyTorch backend / trtllm-serve):
    its streamed responses cost host time on the iteration's critical path."""
    overlap_scheduler: bool | None = None
    """The executor's host work for the next iteration overlaps the GPU's current one (TensorRT-LLM
    PyTorch backend ``disable_overlap_scheduler: false``; ``plan.Engine.overlap_scheduler``)."""
    fused_elementwise: list[Literal[FUSABLE_ELEMENTWISE]] | None = None  # type: ignore[valid-type]
    """The elementwise ops the stack's kernels absorb under ``fusion`` (None: all of them, as
    TensorRT-LLM folds norms, residual adds, RoPE and activations into its kernels' epilogues); the
    others stay memory-bound kernels of their own."""
    instance_dispatch: Dispatch | None = None
    """How the harness hands arriving requests to the instances (``plan.Engine.instance_dispatch``;
    NVIDIA harness ``traffic_distribution_policy``, AMD harness ``schedule_algo``)."""
    host_us_per_stream_event: float | None = Field(default=None, ge=0, le=1000)
    """Host microseconds per streamed response chunk of a Python executor (fitted by
    ``benchmarks/host_term.py``; physical range 1-100 us: building, serialising and sending one
    response object per running request)."""
    # The recipe's layout, checkpoint and stack (a published run's launch settings, data like the
    # fields above). Used where the user fixes no layout axis and the scenario's precision is auto.
    stack: StackName | None = None
    """Serving stack of the recipe (None: the preset's ``stack``). The preset's maturity
    multipliers are fitted on rows of its own stack and apply only to recipes of that stack."""
    tp: int | None = Field(default=None, ge=1, le=1024)
    """Tensor parallelism per instance (vLLM ``--tensor-parallel-size``)."""
    pp: int | None = Field(default=None, ge=1, le=1024)
    """Pipeline parallelism per instance (vLLM ``--pipeline-parallel-size``)."""
    ep: int | None = Field(default=None, ge=1, le=1024)
    """Expert parallelism per instance (vLLM ``--enable-expert-parallel``: ep = tp x data-parallel size)."""
    dp: int | None = Field(default=None, ge=1, le=1024)
    """Attention data parallelism within the instance (1: none)."""
    weights: Precision | None = None
    """Checkpoint weight format (e.g. fp4 for an NVFP4 checkpoint)."""
    weight_mix: dict[Precision, Annotated[float, Field(gt=0, le=1)]] | None = None
    """A mixed-precision checkpoint: the share of the linear layers' weights (by parameter count) in
    each format, summing to 1; each layer runs its GEMMs in its own format (ModelOpt AutoQuantize
    under an ``effective_bits`` budget). In place of ``weights``."""
    kv_cache: Precision | None = None
    """KV-cache format (vLLM ``--kv-cache-dtype``)."""
    vision_attention: Precision | None = None
    """Compute format of the vision encoder's attention (default bf16)."""
    disable: list[str] | None = None
    """The round's optimizations (``optimizations`` / ``choices`` kinds) the recipe's engine does
    not run, e.g. ``overlap`` for a vLLM recipe without dual-batch overlap (``--enable-dbo``)."""

    @field_validator("disable")
    @classmethod
    def _known_optimizations(cls, v):
        from . import REGISTRY

        unknown = [k for k in v or () if k not in REGISTRY]
        if unknown:
            raise ValueError(f"unknown optimization(s) {', '.join(unknown)} (known: {', '.join(sorted(REGISTRY))})")
        return v

    @model_validator(mode="after")
    def _mix_sums_to_one(self):
        if self.weight_mix is not None:
            total = sum(self.weight_mix.values())
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"weight_mix shares sum to {total:.6g}; they must sum to 1")
            if self.weights is not None:
                raise ValueError("weight_mix and weights exclude each other (the mix names every format)")
        return self


class EngineOverride(EngineFields):
    offline: EngineFields | None = None
    """Settings that differ in the Offline scenario."""
    server: EngineFields | None = None
    """Settings that differ in the Server scenario."""
    interactive: EngineFields | None = None
    """Settings that differ in the Interactive scenario."""


class ModelEngine(EngineOverride):
    """A model's engine settings, with per-hardware overrides (hardware profile IDs) where the
    published runs of that model used different settings per system."""

    hardware: dict[str, EngineOverride] = Field(default_factory=dict)


class EngineBlock(Spec):
    """A round's engine settings: defaults plus per-model overrides (model profile IDs)."""

    source: list[str] = Field(min_length=1)
    """Where the values were read (file and columns)."""
    default: EngineOverride = Field(default_factory=EngineOverride)
    models: dict[str, ModelEngine] = Field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """A recipe's layout, formats and stack (None where the recipe does not set them)."""

    stack: Stack
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    dp: int | None = None
    weights: str | None = None
    weight_mix: tuple[tuple[str, float], ...] | None = None
    """(format, share) pairs of a mixed-precision checkpoint (``EngineFields.weight_mix``)."""
    kv_cache: str | None = None
    vision_attention: str | None = None
    disable: tuple[str, ...] = ()
    """Optimization kinds the recipe's engine does not run."""
    moe_backend: str | None = None
    """Routed-expert kernel backend of the recipe (None: not recorded)."""

    @property
    def layout(self) -> dict[str, int]:
        """The layout axes the recipe fixes."""
        return {k: getattr(self, k) for k in ("tp", "pp", "ep", "dp") if getattr(self, k) is not None}


def _merge(base: dict, block: EngineFields | None) -> dict:
    if block is None:
        return base
    fields = block.model_dump(exclude={"offline", "server", "interactive", "hardware"})
    return {**base, **{k: v for k, v in fields.items() if v is not None}}


class PresetSpec(Spec):
    name: str
    """Human-readable name."""
    source: list[str] = Field(min_length=1)
    """What the preset's contents are derived from."""
    kernel_efficiency: float = Field(default=1.0, gt=0, le=2)
    """Multiplier on the hardware's compute and attention efficiencies (software maturity) for every
    kernel but the routed experts' grouped GEMMs, which ``moe_kernel_efficiency`` alone describes."""
    moe_kernel_efficiency: float = Field(default=1.0, gt=0, le=2)
    """Multiplier on routed-expert (grouped GEMM) efficiency: the MoE kernel backend's whole maturity
    (not on top of ``kernel_efficiency``: the experts run the backend's own kernels), on both its MMA
    rate and its weight stream (``moe_memory_fraction``, at most ``memory_fraction``)."""
    host_overhead_scale: float = Field(default=1.0, ge=0, le=10)
    """Multiplier on the hardware's per-step host overhead."""
    moe_backend: MoeBackend | None = None
    """The routed-expert kernel backend ``moe_kernel_efficiency`` describes: the one this round's
    recipes introduced (None: every MoE run of the round uses the round's factor). A recipe on
    another backend (engine setting ``moe_backend``) runs the reference round's kernels, whose
    factor is 1 by definition (``maturity_for``)."""
    stack: StackName = Stack.TENSORRT_LLM.value
    """The serving stack of the rows the three maturity multipliers above are fitted on; a
    recipe of another stack (``engine`` block ``stack``) runs at maturity 1 (the hardware's
    base efficiencies), since no maturity of that stack is fitted."""
    optimizations: list[dict] = Field(default_factory=list)
    """Transforms applied for this round ({kind: ..., params...})."""
    choices: list[dict] = Field(default_factory=list)
    """Transforms available in this round; the search uses each only where it helps."""
    engine: EngineBlock | None = None
    """Serving-engine settings (batch cap, token budget, admission gate, CUDA graphs)."""
    calibration: CalibrationRecord | None = None
    """Set by ``infersim calibrate``."""

    def settings(self, model_id: str, scenario_kind: str, hardware_id: str | None = None) -> dict:
        """Merged engine settings of ``model_id`` on ``hardware_id`` in a scenario of
        ``scenario_kind``: defaults, the model's override, then its per-hardware override, each
        followed by its ``offline`` / ``interactive`` block in that scenario."""
        if self.engine is None:
            return {}
        model = self.engine.models.get(model_id)
        blocks = [self.engine.default, model]
        if model is not None and hardware_id is not None:
            blocks.append(model.hardware.get(hardware_id))
        d: dict = {}
        for block in blocks:
            if block is not None:
                d = _merge(d, block)
                d = _merge(d, getattr(block, scenario_kind, None) if scenario_kind in ("offline", "server", "interactive") else None)
        return d

    def engine_for(self, model_id: str, scenario_kind: str, hardware_id: str | None = None):
        """The ``plan.Engine`` of ``model_id`` (on ``hardware_id``) in a scenario of ``scenario_kind``."""
        from ..plan import Engine

        if self.engine is None:
            return Engine()
        d = self.settings(model_id, scenario_kind, hardware_id)
        sizes = d.get("cuda_graph_batch_sizes")
        return Engine(max_batch_size=d.get("max_batch_size"), max_num_tokens=d.get("max_num_tokens"),
                      chunked_prefill=d.get("chunked_prefill", True),
                      gate_timeout_iters=d.get("adp_timeout_iters", 0), gate_wait_iters=d.get("adp_batching_wait_iters", 0),
                      decode_steps=d.get("num_scheduler_steps", 1),
                      graph_sizes=None if sizes is None else tuple(sorted(sizes)),
                      graphs_capture_prompts=bool(d.get("graphs_capture_prompts")),
                      stream_interval=d.get("stream_interval", 1), python_executor=bool(d.get("python_executor")),
                      overlap_scheduler=bool(d.get("overlap_scheduler")),
                      instance_dispatch=d.get("instance_dispatch") or "random",
                      host_s_per_stream_event=1e-6 * d.get("host_us_per_stream_event", 0.0)
                      if d.get("python_executor") else 0.0,
                      fused_elementwise=None if d.get("fused_elementwise") is None else tuple(d["fused_elementwise"]))

    def recipe_for(self, model_id: str, scenario_kind: str, hardware_id: str | None = None) -> Recipe:
        """The recipe's layout, formats and stack for ``model_id`` on ``hardware_id``."""
        d = self.settings(model_id, scenario_kind, hardware_id)
        fields = {f.name: d.get(f.name) for f in dataclass_fields(Recipe)}
        fields["stack"] = Stack(fields["stack"] or self.stack)
        fields["disable"] = tuple(fields["disable"] or ())
        if fields["weight_mix"] is not None:
            fields["weight_mix"] = tuple(sorted(fields["weight_mix"].items()))
        return Recipe(**fields)

    def maturity_for(self, recipe: Recipe) -> tuple[float, float, float]:
        """(kernel, MoE kernel, host overhead) maturity multipliers for a recipe of ``recipe.stack``:
        the preset's where the stacks match, else 1 (none fitted for that stack). The MoE factor
        describes the round's own MoE backend (``moe_backend``); a recipe that kept an earlier
        backend (v6.0 GB200 NVL72 DeepSeek-R1: WIDEEP, the v5.1 kernels; GB300 Offline: CUTLASS,
        shared/reference/mlperf_submission_configs.md section 1e) gets 1, the reference round's."""
        if recipe.stack != Stack(self.stack):
            return 1.0, 1.0, 1.0
        moe = self.moe_kernel_efficiency
        if self.moe_backend is not None and recipe.moe_backend is not None and recipe.moe_backend != self.moe_backend:
            moe = 1.0  # an earlier round's MoE backend: the reference round's kernels
        return self.kernel_efficiency, moe, self.host_overhead_scale


def presets_dir() -> Path:
    """The bundled presets folder."""
    return bundled_root() / "presets"


def _preset_files() -> dict[str, Path]:
    """Round name → preset file; user profile folders (``--profiles-dir``, INFERSIM_PROFILES,
    with a ``presets/`` subfolder) override the bundled presets."""
    found: dict[str, Path] = {}
    for d in reversed(catalog.search_dirs("preset")):
        if d.is_dir() and (d.name == "presets" or d == presets_dir()):
            for f in d.glob("v*.yaml"):
                found[f.stem] = f
    return found


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in name.lstrip("v").split("."))
    except ValueError:
        raise SpecError(f"round '{name}' is not of the form vX.Y") from None


def list_rounds() -> list[str]:
    """Rounds with a bundled preset, oldest first."""
    return sorted(_preset_files(), key=_version_key)


LATEST = "latest"
"""Round name meaning the newest preset (the default when no round is given)."""


def resolve_round(round_name: str | None) -> str:
    """The preset round used for ``round_name``: itself, the nearest earlier, or the earliest;
    None or ``latest`` gives the newest preset."""
    rounds = list_rounds()
    if round_name is None or round_name == LATEST:
        return rounds[-1]
    key = _version_key(round_name)
    earlier = [r for r in rounds if _version_key(r) <= key]
    return earlier[-1] if earlier else rounds[0]


def _preset_path(name: str, directory: str | os.PathLike | None) -> Path:
    """Where round ``name``'s preset lives: ``directory``, else the profile folders' (user folders
    first), else the bundled folder; it need not exist."""
    if directory is not None:
        return Path(directory) / f"{name}.yaml"
    return _preset_files().get(name, presets_dir() / f"{name}.yaml")


def preset_file(round_name: str, directory: str | os.PathLike | None = None) -> Path | None:
    """The preset file of exactly ``round_name`` (no nearest-earlier fallback), or None."""
    path = _preset_path(round_name, directory)
    return path if path.is_file() else None


@lru_cache(maxsize=32)
def _load(path: str, mtime: float) -> PresetSpec:
    return load_spec(PresetSpec, path)


def load_preset(round_name: str, directory: Path | None = None) -> PresetSpec:
    """Load the preset for ``round_name`` (with the nearest-earlier fallback)."""
    path = _preset_path(resolve_round(round_name) if directory is None else round_name, directory)
    if not path.is_file():
        raise SpecError(f"no preset for round '{round_name}'", file=str(path))
    return _load(str(path), path.stat().st_mtime)


