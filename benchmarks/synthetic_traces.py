"""Write the bundled synthetic example trace ``scenarios/traces/api-endpoints-synthetic-2000.csv``.

SYNTHETIC: nothing in it is measured. It illustrates the trace columns infersim reads
(``isl, osl, arrival_s, prefix_id, prefix_tokens``) with an API-endpoint-like mix chosen by the
project: three request classes whose lengths are the project's own illustrative choices —

- chat (60 %): log-normal prompts, median 600 tokens (σ 0.8), outputs median 300 (σ 0.7); each
  request starts with the 400-token system prompt of one of 8 applications (``prefix_id`` app-k);
- retrieval-augmented (25 %): prompts median 6,000 tokens (σ 0.4), outputs median 350 (σ 0.5),
  no shared prefix; output length loosely tied to prompt length (correlation in the log lengths);
- agent tool calls (15 %): sessions of 6 calls sharing a 2,000-token context (``prefix_id``
  sess-k), prompts 2,000 + median 300 new tokens, outputs median 120 (σ 0.6).

Arrivals: a two-state Markov-modulated Poisson process (a quiet state at 1 request/s and a burst
state at 8 requests/s, mean sojourns 40 s and 5 s), the textbook model of bursty traffic, so the
inter-arrival gaps are over-dispersed (measured c_a² is printed). Seeded: rerunning rewrites the
same file. Usage: ``python benchmarks/synthetic_traces.py [OUT]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

N = 2000
SEED = 2026


def arrivals(rng, n: int) -> np.ndarray:
    """Arrival times of a 2-state MMPP (rates 1/s and 8/s, mean sojourns 40 s and 5 s)."""
    rates, sojourn = (1.0, 8.0), (40.0, 5.0)
    out, t, state = [], 0.0, 0
    while len(out) < n:
        end = t + rng.exponential(sojourn[state])
        while True:
            t += rng.exponential(1.0 / rates[state])
            if t >= end:
                t = end
                break
            out.append(t)
        state = 1 - state
    return np.array(out[:n])


def rows(rng, n: int):
    kind = rng.choice(3, n, p=[0.60, 0.25, 0.15])
    session, calls_left = 0, 0
    for k in kind:
        if k == 0:
            app = int(rng.integers(8))
            isl = 400 + int(rng.lognormal(np.log(600), 0.8))
            osl = int(rng.lognormal(np.log(300), 0.7))
            yield isl, max(osl, 2), f"app-{app}", 400
        elif k == 1:
            z = rng.normal()
            isl = int(6000 * np.exp(0.4 * z))
            osl = int(350 * np.exp(0.5 * (0.5 * z + np.sqrt(0.75) * rng.normal())))
            yield isl, max(osl, 2), "", 0
        else:
            if calls_left == 0:
                session, calls_left = session + 1, 6
            calls_left -= 1
            isl = 2000 + int(rng.lognormal(np.log(300), 0.6))
            osl = int(rng.lognormal(np.log(120), 0.6))
            yield isl, max(osl, 2), f"sess-{session}", 2000


def main(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    t = arrivals(rng, N)
    lines = ["isl,osl,arrival_s,prefix_id,prefix_tokens"]
    lines += [f"{a},{b},{x:.3f},{p},{q}" for (a, b, p, q), x in zip(rows(rng, N), t)]
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)
    gaps = np.diff(np.round(t, 3))
    print(f"wrote {out}: {N} requests over {t[-1]:.0f} s, gap c_a² = {np.var(gaps) / np.mean(gaps) ** 2:.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else
         Path(__file__).resolve().parent.parent / "scenarios" / "traces" / "api-endpoints-synthetic-2000.csv")
