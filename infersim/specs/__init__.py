"""Spec loading: hardware, model and scenario profiles (frozen pydantic trees)."""

from ._base import Spec, dump_spec, load_spec
from .catalog import add_profile_dir, list_ids, load, load_hardware, load_model, load_scenario, resolve, schema
from .hardware import HardwareSpec
from .model import GqaAttention, MlaAttention, ModelSpec, MoeSpec
from .scenario import LengthSpec, OfflineScenario, PrecisionSpec, ScenarioSpec, ServerScenario, SloSpec, WorkloadSpec

__all__ = [
    "Spec", "dump_spec", "load_spec", "add_profile_dir", "list_ids", "load", "load_hardware", "load_model",
    "load_scenario", "resolve", "schema", "HardwareSpec", "GqaAttention", "MlaAttention", "ModelSpec", "MoeSpec",
    "LengthSpec", "OfflineScenario", "PrecisionSpec", "ScenarioSpec", "ServerScenario", "SloSpec", "WorkloadSpec",
]
