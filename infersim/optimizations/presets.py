"""Per-round software presets: which optimizations an MLPerf round's software had, and its maturity.

A preset is YAML data (``presets/vX.Y.yaml``): ``optimizations`` are applied; ``choices`` are
available but used only where the search finds they help (e.g. MTP, disaggregation);
``kernel_efficiency`` and ``host_overhead_scale`` are the round's two maturity parameters, the
only per-round free parameters, fitted by ``infersim calibrate``. A round without a preset uses
the nearest earlier one; a round later than all presets uses the latest.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field

from ..errors import SpecError
from ..specs._base import Spec, load_spec
from ..specs import catalog
from ..specs.catalog import bundled_root
from ..specs.hardware import CalibrationRecord


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
    cuda_graph_batch_sizes: list[int] | None = None
    """Captured per-rank decode batch sizes (empty list: no graphs; absent: every size)."""
    stream_interval: int | None = Field(default=None, ge=1, le=100_000)
    """Output tokens per streamed chunk."""
    python_executor: bool | None = None
    """The engine's executor loop runs in Python (TensorRT-LLM PyTorch backend / trtllm-serve):
    its streamed responses cost host time on the iteration's critical path."""
    host_us_per_stream_event: float | None = Field(default=None, ge=0, le=1000)
    """Host microseconds per streamed response chunk of a Python executor (fitted by
    ``benchmarks/host_term.py``; physical range 1-100 us: building, serialising and sending one
    response object per running request)."""


class EngineOverride(EngineFields):
    offline: EngineFields | None = None
    """Settings that differ in the Offline scenario."""
    interactive: EngineFields | None = None
    """Settings that differ in the Interactive scenario."""


class EngineBlock(Spec):
    """A round's engine settings: defaults plus per-model overrides (model profile IDs)."""

    source: list[str] = Field(min_length=1)
    """Where the values were read (file and columns)."""
    default: EngineOverride = Field(default_factory=EngineOverride)
    models: dict[str, EngineOverride] = Field(default_factory=dict)


def _merge(base: dict, block: EngineFields | None) -> dict:
    if block is None:
        return base
    fields = block.model_dump(exclude={"offline", "interactive"})
    return {**base, **{k: v for k, v in fields.items() if v is not None}}


class PresetSpec(Spec):
    name: str
    """Human-readable name."""
    source: list[str] = Field(min_length=1)
    """What the preset's contents are derived from."""
    kernel_efficiency: float = Field(default=1.0, gt=0, le=2)
    """Multiplier on the hardware's compute and attention efficiencies (software maturity)."""
    moe_kernel_efficiency: float = Field(default=1.0, gt=0, le=2)
    """Multiplier on routed-expert (grouped GEMM) efficiency: the MoE kernel backend's maturity."""
    host_overhead_scale: float = Field(default=1.0, ge=0, le=10)
    """Multiplier on the hardware's per-step host overhead."""
    optimizations: list[dict] = Field(default_factory=list)
    """Transforms applied for this round ({kind: ..., params...})."""
    choices: list[dict] = Field(default_factory=list)
    """Transforms available in this round; the search uses each only where it helps."""
    engine: EngineBlock | None = None
    """Serving-engine settings (batch cap, token budget, admission gate, CUDA graphs)."""
    calibration: CalibrationRecord | None = None
    """Set by ``infersim calibrate``."""

    def engine_for(self, model_id: str, scenario_kind: str):
        """The ``plan.Engine`` of ``model_id`` in a scenario of ``scenario_kind``: defaults, then
        the model's override, each followed by its ``offline`` / ``interactive`` block in that scenario."""
        from ..plan import Engine

        if self.engine is None:
            return Engine()
        d = {}
        for block in (self.engine.default, self.engine.models.get(model_id)):
            if block is not None:
                d = _merge(d, block)
                d = _merge(d, getattr(block, scenario_kind, None) if scenario_kind in ("offline", "interactive") else None)
        sizes = d.get("cuda_graph_batch_sizes")
        return Engine(max_batch_size=d.get("max_batch_size"), max_num_tokens=d.get("max_num_tokens"),
                      chunked_prefill=d.get("chunked_prefill", True),
                      gate_timeout_iters=d.get("adp_timeout_iters", 0), gate_wait_iters=d.get("adp_batching_wait_iters", 0),
                      graph_sizes=None if sizes is None else tuple(sorted(sizes)),
                      stream_interval=d.get("stream_interval", 1), python_executor=bool(d.get("python_executor")),
                      host_s_per_stream_event=1e-6 * d.get("host_us_per_stream_event", 0.0)
                      if d.get("python_executor") else 0.0)


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


@lru_cache(maxsize=32)
def _load(path: str, mtime: float) -> PresetSpec:
    return load_spec(PresetSpec, path)


def load_preset(round_name: str, directory: Path | None = None) -> PresetSpec:
    """Load the preset for ``round_name`` (with the nearest-earlier fallback)."""
    if directory is None:
        name = resolve_round(round_name)
        path = _preset_files().get(name, presets_dir() / f"{name}.yaml")
    else:
        path = Path(directory) / f"{round_name}.yaml"
    if not path.is_file():
        raise SpecError(f"no preset for round '{round_name}'", file=str(path))
    return _load(str(path), path.stat().st_mtime)


