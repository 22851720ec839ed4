"""Which refit parameter moves the attention-DP gain (issue 12; effects.md section 4, TRT3).

The gain is tests/test_effects.py::test_attention_dp_vs_tp_matches_trt_llm_blog_3: `infersim run
-H b200 -m deepseek-r1 -s batch-1k-1k -n 8 --isl 1024 --osl 2048 --round v6.0 --tp 8 --ep 8` with
`--dp 8 --batch 4000` (attention DP8) over `--dp 1 --batch 500` (attention TP8), tokens/s per GPU.
This script takes the current profiles and puts back one parameter at a time from a previous fit
(default 18ceddd, the fit before 2026-11-25's merges and refit, read with `git show`), in a
scratch profiles folder, and also turns the GEMM k-depth term off (gemm_k_overhead_blocks 0). For
each variant it prints the gain, both layouts' tokens/s per GPU, their MTP depth and their decode
step split into gemm / attention / comm / overhead (ms), once with MTP searched per layout (the
v6.0 preset's default) and once without MTP (`--disable mtp`: TRT3's max-throughput recipe, the
B200 max-throughput commands of NVIDIA/TensorRT-LLM docs/source/blogs/
Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md, sets no speculative_config).

Run: python benchmarks/attention_dp_isolation.py [COMMIT]   (needs git and the repo history)
"""

from __future__ import annotations

import sys
import time

from _profile_variants import now_and_then, put_back, run_json, scratch_folders, with_value

HW, PRESET = "hardware_profiles/b200.yaml", "presets/v6.0.yaml"
HW_KEYS = ("compute_fraction", "attention_fraction", "gemm_m_half", "step_overhead_ms", "kv_memory_fraction")
PRESET_KEYS = ("kernel_efficiency", "moe_kernel_efficiency", "host_overhead_scale")
BASE = ["-H", "b200", "-m", "deepseek-r1", "-s", "batch-1k-1k", "-n", "8", "--isl", "1024", "--osl", "2048",
        "--round", "v6.0", "--tp", "8", "--ep", "8", "--format", "json"]
DP8, TP8 = ["--dp", "8", "--batch", "4000"], ["--dp", "1", "--batch", "500"]
PARTS = ("gemm", "attention", "comm", "overhead")


def predict(folder, extra: list[str]) -> tuple[float, str]:
    d = run_json(folder, BASE + extra)
    parts = d["breakdown"]["by_kind_s"]
    split = "/".join(f"{parts[p] * 1e3:.1f}" for p in PARTS)
    return d["tokens_per_s_per_accelerator"], f"MTP{d['config']['mtp_depth']} {split}"


def main() -> None:
    commit = sys.argv[1] if len(sys.argv) > 1 else "18ceddd"
    t0 = time.time()
    (new_hw, new_pr), (old_hw, old_pr) = now_and_then((HW, PRESET), commit)
    texts = [("current profiles", new_hw, new_pr), (f"all from {commit}", old_hw, old_pr),
             ("gemm_k_overhead_blocks -> 0", with_value(new_hw, "gemm_k_overhead_blocks", "0"), new_pr),
             (f"all from {commit} + k-depth 4.1", with_value(old_hw, "gemm_k_overhead_blocks", "4.1"), old_pr)]
    texts += [(name, new_hw, pr) for name, pr in put_back("v6.0", new_pr, old_pr, PRESET_KEYS, changed_only=True)]
    texts += [(name, hw, new_pr) for name, hw in put_back("b200", new_hw, old_hw, HW_KEYS, changed_only=True)]
    print(f"{'variant':42s} {'MTP':>6s} {'gain':>6s} {'DP8 tok/s/GPU':>13s} {'TP8 tok/s/GPU':>13s}   "
          f"step ms gemm/attention/comm/overhead: DP8 | TP8")
    for name, folder in scratch_folders([(name, {HW: hw, PRESET: pr}) for name, hw, pr in texts]):
        for mtp, extra in (("search", []), ("off", ["--disable", "mtp"])):
            dp, dp_cfg = predict(folder, DP8 + extra)
            tp, tp_cfg = predict(folder, TP8 + extra)
            print(f"{name:42s} {mtp:>6s} {dp / tp:5.2f}x {dp:13,.0f} {tp:13,.0f}   {dp_cfg} | {tp_cfg}", flush=True)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
