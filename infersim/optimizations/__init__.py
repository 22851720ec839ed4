"""Serving optimizations as named, pure plan transforms, plus per-round presets.

Explicit imports (not auto-discovery) so that grep finds every transform.
"""

from .base import REGISTRY, Context, Needs, Stage, Transform, apply_all, compose, make, register
from .attention_dp import AttentionDP
from .disagg import Disaggregation
from .fusion import Fusion
from .kv_routing import KVRouting
from .mtp import MultiTokenPrediction
from .overlap import Overlap
from .selection import Selection, select
from .wide_ep import WideEP

__all__ = ["REGISTRY", "Context", "Needs", "Selection", "select", "Stage", "Transform", "apply_all", "compose", "make", "register", "AttentionDP",
           "Disaggregation", "Fusion", "KVRouting", "MultiTokenPrediction", "Overlap", "WideEP"]
