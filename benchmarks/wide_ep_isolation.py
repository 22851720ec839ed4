"""Which refit parameter moves the wide-EP gain (issue 12; effects.md section 4).

The gain is `infersim run -H gb300-nvl72 -m deepseek-r1 -s mlperf-deepseek-r1-interactive -n 72
--round v6.0` with and without `--disable wide_ep` (tokens/s per GPU). The refit with operating
points (commit 18ceddd) changed the v6.0 preset and the GB300 NVL72 efficiencies; this script
takes the current profiles and puts back one parameter at a time from the previous fit (the parent
commit, read with `git show`), in a scratch profiles folder, and prints the gain of each variant.

Run: python benchmarks/wide_ep_isolation.py [COMMIT]   (default 18ceddd^; needs git and the repo history)
"""

from __future__ import annotations

import sys
import time

from _profile_variants import now_and_then, put_back, run_json, scratch_folders

HW, PRESET = "hardware_profiles/gb300-nvl72.yaml", "presets/v6.0.yaml"
HW_KEYS = ("compute_fraction", "attention_fraction", "gemm_m_half", "step_overhead_ms", "kv_memory_fraction")
PRESET_KEYS = ("kernel_efficiency", "moe_kernel_efficiency", "host_overhead_scale")
RUN = ["-H", "gb300-nvl72", "-m", "deepseek-r1", "-s", "mlperf-deepseek-r1-interactive", "-n", "72", "--round", "v6.0",
       "--format", "json"]


def predict(folder, extra: list[str]) -> tuple[float, str]:
    d = run_json(folder, RUN + extra)
    c = d["config"]
    return d["tokens_per_s_per_accelerator"], f"TP{c['tp']}/EP{c['ep']}/DP{c['dp']} batch {c['batch']:.0f} MTP {c['mtp_depth']}"


def main() -> None:
    commit = sys.argv[1] if len(sys.argv) > 1 else "18ceddd^"
    t0 = time.time()
    (new_hw, new_pr), (old_hw, old_pr) = now_and_then((HW, PRESET), commit)
    texts = [("current profiles", new_hw, new_pr), (f"all from {commit}", old_hw, old_pr)]
    texts += [(name, new_hw, pr) for name, pr in put_back("v6.0", new_pr, old_pr, PRESET_KEYS)]
    texts += [(name, hw, new_pr) for name, hw in put_back("gb300", new_hw, old_hw, HW_KEYS)]
    for name, folder in scratch_folders([(name, {HW: hw, PRESET: pr}) for name, hw, pr in texts]):
        full, full_cfg = predict(folder, [])
        narrow, narrow_cfg = predict(folder, ["--disable", "wide_ep"])
        print(f"{name:44s} {full:6,.0f} / {narrow:6,.0f} tok/s/GPU = {full / narrow:.2f}x   "
              f"({full_cfg} | {narrow_cfg})", flush=True)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
