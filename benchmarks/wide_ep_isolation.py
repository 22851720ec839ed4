"""Which refit parameter moves the wide-EP gain (issue 12; effects.md section 4).

The gain is `infersim run -H gb300-nvl72 -m deepseek-r1 -s mlperf-deepseek-r1-interactive -n 72
--round v6.0` with and without `--disable wide_ep` (tokens/s per GPU). The refit with operating
points (commit 18ceddd) changed the v6.0 preset and the GB300 NVL72 efficiencies; this script
takes the current profiles and puts back one parameter at a time from the previous fit (the parent
commit, read with `git show`), in a scratch profiles folder, and prints the gain of each variant.

Run: python benchmarks/wide_ep_isolation.py [COMMIT]   (default 18ceddd^; needs git and the repo history)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HW, PRESET = "hardware_profiles/gb300-nvl72.yaml", "presets/v6.0.yaml"
HW_KEYS = ("compute_fraction", "attention_fraction", "gemm_m_half", "step_overhead_ms", "kv_memory_fraction")
PRESET_KEYS = ("kernel_efficiency", "moe_kernel_efficiency", "host_overhead_scale")
RUN = ["-H", "gb300-nvl72", "-m", "deepseek-r1", "-s", "mlperf-deepseek-r1-interactive", "-n", "72", "--round", "v6.0",
       "--format", "json"]


def value(text: str, key: str) -> str:
    return re.search(rf"^\s*{key}:\s*([0-9.]+)", text, re.M).group(1)


def with_value(text: str, key: str, v: str) -> str:
    return re.sub(rf"^(\s*{key}:\s*)([0-9.]+)", lambda m: m.group(1) + v, text, count=1, flags=re.M)


def predict(folder: Path, extra: list[str]) -> tuple[float, str]:
    out = subprocess.run([sys.executable, "-m", "infersim", "--profiles-dir", str(folder), "run", *RUN, *extra],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    c = d["config"]
    return d["tokens_per_s_per_accelerator"], f"TP{c['tp']}/EP{c['ep']}/DP{c['dp']} batch {c['batch']:.0f} MTP {c['mtp_depth']}"


def main() -> None:
    commit = sys.argv[1] if len(sys.argv) > 1 else "18ceddd^"
    t0 = time.time()
    new_hw, new_pr = (ROOT / HW).read_text(), (ROOT / PRESET).read_text()
    old_hw, old_pr = (subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{p}"], capture_output=True, text=True,
                                     check=True).stdout for p in (HW, PRESET))
    variants = [("current profiles", new_hw, new_pr), (f"all from {commit}", old_hw, old_pr)]
    variants += [(f"v6.0 {k} {value(new_pr, k)} -> {value(old_pr, k)}", new_hw, with_value(new_pr, k, value(old_pr, k)))
                 for k in PRESET_KEYS]
    variants += [(f"gb300 {k} {value(new_hw, k)} -> {value(old_hw, k)}", with_value(new_hw, k, value(old_hw, k)), new_pr)
                 for k in HW_KEYS]
    with tempfile.TemporaryDirectory() as tmp:
        for name, hw, pr in variants:
            folder = Path(tmp) / str(abs(hash(name)))
            (folder / "hardware_profiles").mkdir(parents=True)
            (folder / "presets").mkdir()
            (folder / HW).write_text(hw)
            (folder / PRESET).write_text(pr)
            full, full_cfg = predict(folder, [])
            narrow, narrow_cfg = predict(folder, ["--disable", "wide_ep"])
            print(f"{name:44s} {full:6,.0f} / {narrow:6,.0f} tok/s/GPU = {full / narrow:.2f}x   "
                  f"({full_cfg} | {narrow_cfg})", flush=True)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
