"""Load time of a large (about 3 MB) profile: pure-Python safe loader vs libyaml's safe C loader.

    python benchmarks/yaml_load.py [--mb 3]

Writes a scenario whose input-length histogram has enough (length, weight) pairs to reach the
size, then times: parsing with ``yaml.safe_load`` (pure Python, what the loader used before),
parsing with ``infersim.files.read_yaml`` (CSafeLoader where available) and the whole
``catalog.load`` (read + parse + strict validation).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from infersim import files
from infersim.specs import catalog


def _timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=3.0)
    args = ap.parse_args()
    base = (catalog.bundled_root() / "scenarios" / "chat-1k-1k.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(base)
    pair = len("  - [12345.0, 1.0]\n")
    n = int(args.mb * 1e6 / pair)
    data["workload"]["isl"] = {"mean": 1000.0, "histogram": [[float(1 + i % 20000), 1.0] for i in range(n)]}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big-scenario.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None), encoding="utf-8")
        size = path.stat().st_size
        text = path.read_text(encoding="utf-8")
        py = _timed(lambda: yaml.load(text, Loader=yaml.SafeLoader), repeat=1)
        c = _timed(lambda: files.read_yaml(path))
        full = _timed(lambda: catalog._load_cached("scenario", str(path), time.time()))
    print(f"file: {size / 1e6:.2f} MB, {n:,} histogram pairs")
    print(f"pure-Python SafeLoader parse: {py:.2f} s")
    print(f"{files.YAML_LOADER.__name__} parse (files.read_yaml): {c:.2f} s")
    print(f"catalog.load (read + parse + strict validation): {full:.2f} s")


if __name__ == "__main__":
    main()
