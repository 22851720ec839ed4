"""The costing oracle: roofline op time and collective time (infersim.roofline, infersim.comm).

Hand-computed formula cases first, then properties. Collective costs live here with the roofline
because together they are the one pricing function every op record goes through.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersim import comm, roofline
from infersim.graph import Collective
from infersim.roofline import Bound

import strategies as S

H100 = S.hardware("h100-sxm")
# H100 SXM with the in-switch (NVLS) all-reduce rate measured on the same NVSwitch fabric (8x H200:
# 482 GB/s bus bandwidth of 450, 1.07); the shipped profile leaves it unset (docs/readme-sessions.md,
# "Twenty-third session")
H100_NVLS = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"all_reduce_fraction": 1.07})})
MI300X = S.hardware("mi300x")


# ---- roofline ------------------------------------------------------------------------------------


def test_op_time_takes_the_slower_of_compute_and_memory():
    # compute: 1e12 FLOP / (0.5 · 1e15 FLOP/s) = 2.0e-3 s
    # memory:  1e9 B / (0.8 · 2e12 B/s)        = 6.25e-4 s  → compute-bound, t = 2 ms
    t, tc, tm = roofline.op_time(1e12, 1e9, 1e15, 2e12, 0.5, 0.8)
    assert tc == pytest.approx(2.0e-3, rel=1e-12)
    assert tm == pytest.approx(6.25e-4, rel=1e-12)
    assert t == pytest.approx(2.0e-3, rel=1e-12)
    assert roofline.bound_by(tc, tm) == Bound.COMPUTE
    # 10x the bytes: memory 6.25e-3 s > compute 2e-3 s
    t, tc, tm = roofline.op_time(1e12, 1e10, 1e15, 2e12, 0.5, 0.8)
    assert t == pytest.approx(6.25e-3, rel=1e-12)
    assert roofline.bound_by(tc, tm) == Bound.MEMORY


def test_bound_by_tie_counts_as_compute():
    assert roofline.bound_by(1.0, 1.0) == Bound.COMPUTE


def test_op_time_broadcasts_over_a_grid():
    flops = np.array([1e9, 1e12, 1e15])[:, None]  # [3, 1]
    bw = np.array([1e12, 2e12, 4e12, 8e12])[None, :]  # [1, 4]
    t, tc, tm = roofline.op_time(flops, 1e9, 1e15, bw, 0.75, 0.8)
    assert t.shape == (3, 4)  # tc is [3, 1] and tm [1, 4]: each keeps only the axes it depends on
    assert tc.shape == (3, 1) and tm.shape == (1, 4)
    np.testing.assert_allclose(t, np.maximum(flops / 0.75e15, 1e9 / (0.8 * bw)), rtol=1e-12)


def test_gemm_efficiency_half_point_and_limits():
    # η(m) = 0.8 · m / (m + 32): m = 32 → 0.4; m = 1 → 0.8/33; m = 1e9 → ≈ 0.8
    assert roofline.gemm_efficiency(32, 0.8, 32) == pytest.approx(0.4)
    assert roofline.gemm_efficiency(1, 0.8, 32) == pytest.approx(0.8 / 33)
    assert roofline.gemm_efficiency(1e9, 0.8, 32) == pytest.approx(0.8, rel=1e-6)
    # m_half = 0: flat efficiency at every size
    np.testing.assert_allclose(roofline.gemm_efficiency(np.array([1, 7, 4096]), 0.7, 0.0), 0.7)


@given(m1=st.floats(0.5, 1e6), m2=st.floats(0.5, 1e6), cf=st.floats(0.05, 1.0), mh=st.floats(0.0, 512.0))
@S.examples(50)
def test_gemm_efficiency_is_monotone_and_bounded(m1, m2, cf, mh):
    lo, hi = sorted((m1, m2))
    e_lo, e_hi = roofline.gemm_efficiency(lo, cf, mh), roofline.gemm_efficiency(hi, cf, mh)
    assert 0 < e_lo <= e_hi * (1 + 1e-12)
    assert e_hi <= cf * (1 + 1e-12)


@given(flops=st.floats(0, 1e18), nbytes=st.floats(0, 1e13), rate=st.floats(1e12, 1e16), bw=st.floats(1e11, 1e14),
       ce=st.floats(0.01, 1), me=st.floats(0.01, 1))
@S.examples(50)
def test_op_time_is_at_least_each_roof(flops, nbytes, rate, bw, ce, me):
    t, tc, tm = roofline.op_time(flops, nbytes, rate, bw, ce, me)
    assert t >= flops / rate * (1 - 1e-12)  # never faster than peak compute
    assert t >= nbytes / bw * (1 - 1e-12)  # never faster than peak bandwidth
    assert t == max(tc, tm)


# ---- collectives -----------------------------------------------------------------------------------


def test_all_reduce_ring_group_of_8_on_h100_by_hand():
    # H100 SXM: NVLink 450 GB/s unidirectional per GPU, comm_fraction 0.8 → 360 GB/s usable;
    # tier latency 10 µs. Ring all-reduce of S = 1e8 B over n = 8:
    #   2·(n−1)/n·S / BW = 2 · 7/8 · 1e8 / 3.6e11 = 4.8611e-4 s;  + 10 µs = 4.9611e-4 s
    t = comm.collective_time(Collective.ALL_REDUCE, 1e8, 8, H100)
    assert float(t) == pytest.approx(2 * 7 / 8 * 1e8 / 3.6e11 + 10e-6, rel=1e-9)
    assert float(t) == pytest.approx(4.96111e-4, rel=1e-5)


def test_nvls_all_reduce_on_h100_by_hand():
    # NVLS all-reduce bus bandwidth 1.07 × 450 GB/s = 481.5 GB/s (8x H200 measured 482 GB/s busbw,
    # same NVSwitch fabric); S = 1e8 B over n = 8:
    #   2·7/8·1e8 / 4.815e11 + 10 µs = 3.6345e-4 + 1e-5 = 3.7345e-4 s (ring: 4.9611e-4 s)
    t = comm.collective_time(Collective.ALL_REDUCE, 1e8, 8, H100_NVLS)
    assert float(t) == pytest.approx(2 * 7 / 8 * 1e8 / (1.07 * 4.5e11) + 10e-6, rel=1e-9)
    # other collectives keep the ring's fraction
    for kind in (Collective.ALL_GATHER, Collective.ALL_TO_ALL, Collective.P2P):
        assert float(comm.collective_time(kind, 1e8, 8, H100_NVLS)) == float(comm.collective_time(kind, 1e8, 8, H100))
    # across nodes only the NVLink phase reduces in the switch; the NIC phase stays at comm_fraction:
    # 2·7/8·1e8/4.815e11 + 10 µs + 2·(1/2)·(1e8/8)/4e10 + 20 µs
    t16 = comm.collective_time(Collective.ALL_REDUCE, 1e8, 16, H100_NVLS)
    assert float(t16) == pytest.approx(2 * 7 / 8 * 1e8 / (1.07 * 4.5e11) + 10e-6 + 1e8 / 8 / 4e10 + 20e-6, rel=1e-9)
    # an explicit comm_fraction (the caller's override) prices every phase at it
    t_over = comm.collective_time(Collective.ALL_REDUCE, 1e8, 8, H100_NVLS, comm_fraction=0.8)
    assert float(t_over) == pytest.approx(float(comm.collective_time(Collective.ALL_REDUCE, 1e8, 8, H100)), rel=1e-12)


def test_in_switch_reduction_only_on_a_switch():
    # a mesh (xGMI) has no switch to reduce in: the field changes nothing there
    mesh = MI300X.model_copy(update={"efficiency": MI300X.efficiency.model_copy(update={"all_reduce_fraction": 1.2})})
    for n in (2, 4, 8):
        assert float(comm.collective_time(Collective.ALL_REDUCE, 1e8, n, mesh)) == \
            float(comm.collective_time(Collective.ALL_REDUCE, 1e8, n, MI300X))


def test_all_gather_and_all_to_all_move_half_an_all_reduce():
    # (n−1)/n·S / BW + latency = 7/8 · 1e8 / 3.6e11 + 10 µs = 2.5306e-4 s
    for kind in (Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        t = comm.collective_time(kind, 1e8, 8, H100)
        assert float(t) == pytest.approx(7 / 8 * 1e8 / 3.6e11 + 10e-6, rel=1e-9)


def test_p2p_sends_the_whole_payload():
    # S / BW + latency = 1e8 / 3.6e11 + 10 µs
    t = comm.collective_time(Collective.P2P, 1e8, 2, H100)
    assert float(t) == pytest.approx(1e8 / 3.6e11 + 10e-6, rel=1e-9)


@pytest.mark.parametrize("kind", list(Collective))
def test_group_of_one_costs_nothing(kind):
    assert float(comm.collective_time(kind, 1e9, 1, H100)) == 0.0


def test_group_beyond_the_domain_is_hierarchical():
    # n = 16 = 2 nodes of 8: reduce-scatter + all-gather inside the node over NVLink (3.6e11 B/s,
    # 10 µs), then an all-reduce of each rank's 1/8 shard across the 2 nodes over its 400 Gbit/s NIC
    # (5e10 B/s · 0.8 = 4e10 B/s; latency 10 µs · (1 + log2 2) = 20 µs):
    #   2·7/8·1e8/3.6e11 + 10e-6 + 2·(1/2)·(1e8/8)/4e10 + 20e-6 = 4.8611e-4 + 1e-5 + 3.125e-4 + 2e-5
    t16 = comm.collective_time(Collective.ALL_REDUCE, 1e8, 16, H100)
    assert float(t16) == pytest.approx(2 * 7 / 8 * 1e8 / 3.6e11 + 10e-6 + 1e8 / 8 / 4e10 + 20e-6, rel=1e-9)
    # n = 64: 8 nodes → cross-node part 2·7/8·(1e8/8)/4e10, latency 10 µs · (1 + 3) = 40 µs
    t64 = comm.collective_time(Collective.ALL_REDUCE, 1e8, 64, H100)
    assert float(t64) == pytest.approx(2 * 7 / 8 * 1e8 / 3.6e11 + 10e-6 + 2 * 7 / 8 * 1e8 / 8 / 4e10 + 40e-6, rel=1e-9)
    # leaving the node is slower than staying in it, and faster than a flat ring over the NICs
    t8 = float(comm.collective_time(Collective.ALL_REDUCE, 1e8, 8, H100))
    assert t8 < float(t16) < 2 * 15 / 16 * 1e8 / 4e10


def test_link_bandwidth_mesh_scales_with_links_used():
    # MI300X xGMI mesh: 448 GB/s over 7 peer links; a group of n uses n−1 of them:
    # n = 2 → 64 GB/s, n = 4 → 192 GB/s, n = 8 → 448 GB/s
    bw = comm.link_bandwidth(MI300X, np.array([2, 4, 8]))
    np.testing.assert_allclose(bw, [64e9, 192e9, 448e9], rtol=1e-12)
    # switch fabric: full bandwidth to any group inside the domain
    np.testing.assert_allclose(comm.link_bandwidth(H100, np.array([2, 4, 8])), 450e9, rtol=1e-12)


def test_collective_time_broadcasts():
    payload = np.array([1e6, 1e8])[:, None]  # [2, 1]
    group = np.array([1, 2, 8, 16])[None, :]  # [1, 4]
    t = comm.collective_time(Collective.ALL_REDUCE, payload, group, H100)
    assert t.shape == (2, 4)
    for i in range(2):
        for j in range(4):
            one = comm.collective_time(Collective.ALL_REDUCE, float(payload[i, 0]), int(group[0, j]), H100)
            np.testing.assert_allclose(t[i, j], one, rtol=1e-12)


@given(hw_id=S.hardware_ids, kind=st.sampled_from(list(Collective)), s1=st.floats(0, 1e10), s2=st.floats(0, 1e10),
       group=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 72, 128]))
@S.examples(50)
def test_collective_time_is_nonnegative_and_monotone_in_payload(hw_id, kind, s1, s2, group):
    hw = S.hardware(hw_id)
    lo, hi = sorted((s1, s2))
    t_lo = float(comm.collective_time(kind, lo, group, hw))
    t_hi = float(comm.collective_time(kind, hi, group, hw))
    assert 0.0 <= t_lo <= t_hi * (1 + 1e-12)


def test_partial_overlap_costs_most_near_the_ridge_and_nothing_far_from_it():
    from infersim.roofline import op_time

    flops = np.array([1e9, 1e12, 1e15])  # memory-bound, at the ridge, compute-bound
    bytes_moved = 1e9
    ideal, tc, tm = op_time(flops, bytes_moved, 1e15, 1e12, 1.0, 1.0)
    assert np.allclose(ideal, np.maximum(tc, tm))
    none, _, _ = op_time(flops, bytes_moved, 1e15, 1e12, 1.0, 1.0, overlap=0.0)
    assert np.allclose(none, tc + tm)
    half, _, _ = op_time(flops, bytes_moved, 1e15, 1e12, 1.0, 1.0, overlap=0.5)
    assert np.all(ideal <= half) and np.all(half <= none)
    loss = half / ideal - 1
    assert loss[1] == pytest.approx(0.5) and loss[0] < 0.001 and loss[2] < 0.001
    # arrays of overlap broadcast like every other efficiency
    per_point, _, _ = op_time(flops, bytes_moved, 1e15, 1e12, 1.0, 1.0, overlap=np.array([0.0, 0.5, 1.0]))
    assert np.allclose(per_point, [none[0], half[1], ideal[2]])


# ---- GEMM k-depth efficiency ------------------------------------------------------------------------


def test_k_depth_efficiency_counts_128_byte_k_blocks():
    # n = ⌈K·bytes/128⌉ k-blocks, η = n / (n + overhead): one FP4 block at K 256 (expert TP8's sliced
    # DeepSeek-R1 down-projection), eight at K 2048 (the whole expert), four BF16 blocks at K 256
    eta = roofline.k_depth_efficiency(np.array([256.0, 2048.0, 7168.0]), 0.5, 4.1)
    assert eta == pytest.approx([1 / 5.1, 8 / 12.1, 28 / 32.1], rel=1e-12)
    assert roofline.k_depth_efficiency(256.0, 2.0, 4.1) == pytest.approx(4 / 8.1, rel=1e-12)
    assert roofline.k_depth_efficiency(100.0, 1.0, 4.1) == pytest.approx(1 / 5.1, rel=1e-12)  # a partial block costs one
    assert roofline.k_depth_efficiency(0.0, 1.0, 4.1) == 1.0  # not a tiled GEMM
    assert roofline.k_depth_efficiency(256.0, 0.5, 0.0) == 1.0  # term off


def test_k_depth_overhead_reproduces_deepgemm_h800_k_sweep():
    # DeepGEMM FP8 GEMMs on H800 at M 4096 (deepseek-ai/DeepGEMM@327ec92 README, 2025-04-09): TFLOPS at
    # K 16384 (N 7168), 7168 (N 4096), 2048 (N 7168), 1536 (N 24576) and 512 (N 32768). The profiles'
    # 4.1 k-blocks comes from the 512/16384 pair; the other three ratios it predicts within 7 %.
    measured = {16384: 1520.0, 7168: 1410.0, 2048: 1168.0, 1536: 1212.0, 512: 775.0}
    eta = {k: float(roofline.k_depth_efficiency(k, 1.0, 4.1)) for k in measured}
    for k, tflops in measured.items():
        predicted = measured[16384] * eta[k] / eta[16384]
        assert predicted == pytest.approx(tflops, rel=0.07), k
    assert measured[16384] * eta[512] / eta[16384] == pytest.approx(775.0, rel=0.01)


@given(st.floats(1.0, 1e5), st.floats(1.0, 1e5), st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.0, 16.0))
def test_k_depth_efficiency_never_falls_with_depth(k1, k2, element_bytes, overhead):
    lo, hi = sorted((k1, k2))
    a = roofline.k_depth_efficiency(lo, element_bytes, overhead)
    b = roofline.k_depth_efficiency(hi, element_bytes, overhead)
    assert 0.0 < a <= b <= 1.0
