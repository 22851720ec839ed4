"""Collectives on a TPU-style torus (ICI): rings per dimension over neighbour links.

A group of n chips occupies the smallest slice shape of the profile holding n chips (e.g. 4x4x4
for 64 chips on TPU v5p / TPU7x, 8x8 for 64 on v5e). Each chip has two links per dimension (±,
the ring's two directions), each of ``link_bandwidth`` one way, so a bidirectional ring along a
dimension of size a moves data at 2·W per chip. Phases run one dimension after another.

- all-reduce: reduce-scatter then all-gather per dimension, the payload shrinking by each
  dimension already reduced: Σ_i 2·(a_i−1)/a_i · S/Π_{j<i} a_j / (2W).
- all-gather (S = gathered size): Σ_i (a_i−1)/a_i · S/Π_{j<i} a_j / (2W).
- all-to-all (S sent per rank, spread evenly, dimension-ordered routing): along a ring of a
  chips a rank sends S/a to each peer at hop distance min(j, a−j), so the link load is
  S/a · Σ_{j=1}^{a−1} min(j, a−j) / 2 per direction: Σ_i S·H(a_i)/(2·a_i·W). Bisection-bound:
  it grows with the ring length where a switch's stays flat.
- p2p: S / W (one neighbour link).
Latency: the tier's per-call latency once per dimension used.
References: jax-ml/scaling-book tpus.md (ICI is a torus of neighbour links; per-link one-way
bandwidth; collectives as rings per axis); shared/reference/accelerators.md (TPU ICI notes).
"""

from __future__ import annotations

import numpy as np

from .graph import Collective
from .specs.hardware import HardwareSpec
from .units import US


def slice_dims(hw: HardwareSpec, group) -> np.ndarray:
    """Chips per dimension of the block a group of ``group`` chips occupies: the smallest profile
    slice holding it, trimmed to the group when the slice is larger. Shape [..., k]."""
    shapes = np.asarray(hw.scale_up.torus.slice_shapes, dtype=float)  # [n_shapes, k], by chip count
    sizes = np.prod(shapes, axis=1)
    order = np.argsort(sizes, kind="stable")
    shapes, sizes = shapes[order], sizes[order]
    n = np.asarray(group, dtype=float)
    idx = np.minimum(np.searchsorted(sizes, n, side="left"), len(sizes) - 1)
    dims = shapes[idx].copy()
    # a group smaller than its slice occupies a sub-block: shrink each dimension in turn while the
    # block still holds the group (2 chips of a 2x2 slice form a 1x2 ring)
    prod = np.prod(dims, axis=-1)
    for i in range(dims.shape[-1]):
        a = dims[..., i]
        new = np.maximum(np.ceil(a * np.minimum(n, prod) / prod - 1e-9), 1.0)
        prod = prod / a * new
        dims[..., i] = new
    return dims


def _ring_hops(a):
    """Σ_{j=1}^{a−1} min(j, a−j): total hop distance from one chip to every other on a ring of a."""
    a = np.asarray(a, dtype=float)
    half = np.floor(a / 2)
    return half * (half + 1) - np.where(np.mod(a, 2) == 0, half, 0.0)


def collective_time(kind: Collective, payload_bytes, group, hw: HardwareSpec, comm_fraction: float):
    """Seconds for one collective of ``group`` chips on the torus (broadcasts; group ≤ domain)."""
    tor = hw.scale_up.torus
    w = tor.link_bandwidth * comm_fraction
    dims = slice_dims(hw, group)  # [..., k]
    k = dims.shape[-1]
    s = np.asarray(payload_bytes, dtype=float)
    total = 0.0
    shrink = 1.0
    used = 0.0
    for i in range(k):
        a = dims[..., i]
        if kind == Collective.ALL_REDUCE:
            t = 2 * (a - 1) / a * s / shrink / (2 * w)
        elif kind == Collective.ALL_GATHER:
            t = (a - 1) / a * s / shrink / (2 * w)
        elif kind == Collective.ALL_TO_ALL:
            t = s * _ring_hops(a) / (2 * a * w)
        else:
            t = np.where(i == 0, s / w, 0.0)
        total = total + t
        used = used + (a > 1)
        shrink = shrink * a
    return total + used * hw.scale_up.latency_us * US
