"""Request traces: per-request lengths, arrival times and shared prefixes read from a CSV.

Columns (header row; one row per request, in arrival order):

- ``isl``, ``osl`` (required): prompt and output tokens, positive integers ≤ 1e7. Kept as pairs:
  besides the two length histograms the trace gives E[ISL·OSL], so a correlation between prompt and
  output length reaches the decode context (``serving.WorkloadStats.context_mean``).
- ``arrival_s`` (optional): arrival time of the request, seconds from any origin, finite, ≥ 0 and
  non-decreasing. Where the arrivals switch slowly between a quiet and a busy rate
  (``Trace.rate_states``: a two-state Markov-modulated Poisson fit), the states become the
  workload's ``arrival_states`` (Poisson within each). The measured squared coefficient of
  variation of the inter-arrival gaps, c_a² = Var(gap)/E[gap]², becomes its
  ``arrival_dispersion`` (1 = Poisson; with states, used only by the disaggregated prefill pool). Only the shape of the arrival process is taken: the
  arrival *rate* is what the prediction solves for.
  The estimate treats the gaps as a renewal process (it ignores correlation between successive
  gaps) and is noisy for short traces (its relative standard error is roughly √(2/n) for
  near-exponential gaps and larger for heavy-tailed ones).
- ``prefix_id`` and ``prefix_tokens`` (optional, together): the shared prefix a request starts with
  (a system prompt, an earlier turn of a conversation, an agent's tool context) and its length in
  tokens (0 ≤ prefix_tokens ≤ isl; an empty ``prefix_id`` means no shared prefix). A request whose
  prefix_id appeared earlier in the trace can reuse that prefix's KV cache: the shareable
  fraction is Σ prefix_tokens over those repeat requests / Σ isl, and the working set is the sum
  over distinct prefix_ids of their longest prefix. They become ``prefix_share_fraction`` and
  ``prefix_working_set_tokens`` (what KV-aware routing acts on).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import files
from ..errors import SpecError
from .scenario import MAX_TOKENS

MMPP_WINDOW_GAPS = 5
"""Counting window of the two-state arrival fit, in mean inter-arrival gaps."""
MMPP_MIN_RATIO = 2.0
"""Busy/quiet rate ratio below which the arrivals are not treated as switching between rates."""
MMPP_MIN_ARRIVALS = 25.0
"""Arrivals per mean sojourn in each state needed to treat the states as quasi-static."""
MAX_DISPERSION = 100.0
"""Largest arrival dispersion c_a² accepted (a measured value above it is reported as an error)."""


@dataclass(frozen=True)
class Trace:
    """A trace's columns as arrays (tokens, seconds); optional columns are None when absent."""

    isl: np.ndarray
    osl: np.ndarray
    arrival_s: np.ndarray | None = None
    prefix_id: list[str] | None = None
    prefix_tokens: np.ndarray | None = None

    @property
    def isl_osl_mean(self) -> float:
        """E[ISL·OSL] over the requests, tokens²."""
        return float(np.mean(self.isl * self.osl))

    @property
    def arrival_dispersion(self) -> float | None:
        """c_a² of the inter-arrival gaps (None without timestamps)."""
        if self.arrival_s is None:
            return None
        gaps = np.diff(self.arrival_s)
        return float(np.var(gaps) / np.mean(gaps) ** 2)

    @property
    def arrival_rate_per_s(self) -> float | None:
        if self.arrival_s is None:
            return None
        return float((len(self.arrival_s) - 1) / (self.arrival_s[-1] - self.arrival_s[0]))

    def rate_states(self) -> list[tuple[float, float]] | None:
        """A two-state Markov-modulated Poisson fit of the arrivals when they switch slowly between a
        quiet and a busy rate: [(rate / mean rate, share of time)] per state, or None.

        Notes
        -----
        Arrivals are counted in windows of ``MMPP_WINDOW_GAPS`` mean gaps; the counts are split in
        two by 1-D k-means; each state's rate is its windows' mean count, its share of time its share
        of windows, its sojourn the mean run of consecutive windows × the window. The fit is kept
        only when the busy rate is at least ``MMPP_MIN_RATIO`` × the quiet one and each state's
        mean sojourn holds at least ``MMPP_MIN_ARRIVALS`` arrivals (so a queue reaches each state's
        steady state; a renewal process of any c_a² has runs of a window or two and is rejected).
        """
        if self.arrival_s is None or len(self.arrival_s) < 20 * MMPP_WINDOW_GAPS:
            return None
        t = self.arrival_s - self.arrival_s[0]
        width = MMPP_WINDOW_GAPS * t[-1] / (len(t) - 1)
        counts = np.bincount(np.minimum((t / width).astype(int), int(t[-1] / width) - 1))
        counts = counts[: int(t[-1] / width)].astype(float)
        lo, hi = np.percentile(counts, 25), np.percentile(counts, 75)
        if not hi > lo:
            return None
        for _ in range(50):
            busy = np.abs(counts - hi) < np.abs(counts - lo)
            if busy.all() or not busy.any():
                return None
            lo, hi = counts[~busy].mean(), counts[busy].mean()
        if not (lo > 0 and hi >= MMPP_MIN_RATIO * lo):
            return None
        edges = np.flatnonzero(np.diff(busy.astype(int))) + 1
        runs = np.diff(np.concatenate([[0], edges, [len(busy)]]))
        state = busy[np.concatenate([[0], edges])]
        for s, rate in ((False, lo), (True, hi)):
            if runs[state == s].mean() * rate < MMPP_MIN_ARRIVALS:
                return None
        mean = counts.mean()
        share_busy = float(busy.mean())
        return [(float(lo / mean), 1.0 - share_busy), (float(hi / mean), share_busy)]

    def prefix_reuse(self) -> tuple[float, float] | None:
        """(shareable fraction of input tokens, working set tokens), or None without prefix columns."""
        if self.prefix_id is None:
            return None
        seen: dict[str, float] = {}
        reused = 0.0
        for pid, tok in zip(self.prefix_id, self.prefix_tokens.tolist()):
            if not pid:
                continue
            if pid in seen:
                reused += min(tok, seen[pid])  # only what the earlier request left cached
                seen[pid] = max(seen[pid], tok)
            else:
                seen[pid] = tok
        return reused / float(np.sum(self.isl)), float(sum(seen.values()))


def _column(rows: list[list[str]], j: int, name: str, path: Path, *, integer: bool, lo: float, hi: float,
            lo_open: bool) -> np.ndarray:
    """One numeric column, checked row by row (SpecError naming the file, row and column)."""
    out = np.empty(len(rows))
    kind = "an integer number of tokens" if integer else "a number of seconds"
    for i, row in enumerate(rows):
        text = row[j].strip() if j < len(row) else ""
        try:
            v = float(text)
        except ValueError:
            raise SpecError(f"row {i + 2}, column {name}: expected {kind} (got {text[:40]!r})", file=str(path)) from None
        bad_lo = v <= lo if lo_open else v < lo
        if not np.isfinite(v) or bad_lo or v > hi or (integer and v != round(v)):
            rng = f"{'an integer ' if integer else ''}{lo:g} {'<' if lo_open else '<='} {name} <= {hi:g}"
            raise SpecError(f"row {i + 2}, column {name}: expected {rng} (got {text[:40]})", file=str(path))
        out[i] = v
    return out


def read_trace(path: Path) -> Trace:
    """Read and check a trace CSV (see the module doc for its columns)."""
    path = Path(path)
    text = files.read_text(path, what="trace", limit=files.MAX_TRACE_BYTES)
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise SpecError(f"not a readable CSV ({exc})", file=str(path)) from None
    if not rows:
        raise SpecError("trace needs columns 'isl' and 'osl' (tokens)", file=str(path))
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    col = {h: j for j, h in enumerate(header)}
    if not {"isl", "osl"} <= col.keys():
        raise SpecError("trace needs columns 'isl' and 'osl' (tokens)", file=str(path))
    if ("prefix_id" in col) != ("prefix_tokens" in col):
        raise SpecError("columns 'prefix_id' and 'prefix_tokens' go together (give both or neither)", file=str(path))
    if not body:
        raise SpecError("trace has no rows", file=str(path))
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise SpecError(f"row {i + 2}: expected {len(header)} fields as in the header (got {len(r)})",
                            file=str(path))
    isl = _column(body, col["isl"], "isl", path, integer=True, lo=0, hi=MAX_TOKENS, lo_open=True)
    osl = _column(body, col["osl"], "osl", path, integer=True, lo=0, hi=MAX_TOKENS, lo_open=True)
    arrival = None
    if "arrival_s" in col:
        arrival = _column(body, col["arrival_s"], "arrival_s", path, integer=False, lo=0, hi=1e12, lo_open=False)
        back = np.nonzero(np.diff(arrival) < 0)[0]
        if len(back):
            i = int(back[0]) + 1
            raise SpecError(f"row {i + 2}, column arrival_s: arrival times must be non-decreasing "
                            f"(got {arrival[i]:g} after {arrival[i - 1]:g}); sort the trace by arrival", file=str(path))
        if len(arrival) < 3:
            raise SpecError("column arrival_s: at least 3 requests are needed to measure the arrival dispersion "
                            f"(got {len(arrival)})", file=str(path))
        if not arrival[-1] > arrival[0]:
            raise SpecError("column arrival_s: every request arrives at the same time (expected a time span > 0 s)",
                            file=str(path))
    pid = ptok = None
    if "prefix_id" in col:
        j = col["prefix_id"]
        pid = [r[j].strip() for r in body]
        ptok = _column(body, col["prefix_tokens"], "prefix_tokens", path, integer=True, lo=0, hi=MAX_TOKENS,
                       lo_open=False)
        over = np.nonzero(ptok > isl)[0]
        if len(over):
            i = int(over[0])
            raise SpecError(f"row {i + 2}, column prefix_tokens: expected 0 <= prefix_tokens <= isl "
                            f"(got {ptok[i]:g} > {isl[i]:g})", file=str(path))
    tr = Trace(isl=isl, osl=osl, arrival_s=arrival, prefix_id=pid, prefix_tokens=ptok)
    ca2 = tr.arrival_dispersion
    if ca2 is not None and ca2 > MAX_DISPERSION:
        raise SpecError(f"column arrival_s: measured arrival dispersion c_a² = {ca2:.3g} is outside the supported "
                        f"range [0, {MAX_DISPERSION:g}] (is the trace a concatenation of separate sessions?)",
                        file=str(path))
    return tr


def workload_update(tr: Trace) -> dict:
    """The WorkloadSpec fields a trace sets (lengths, pairing, and what its optional columns give)."""
    from .scenario import LengthSpec

    def spec(values: np.ndarray) -> LengthSpec:
        x, counts = np.unique(values, return_counts=True)
        return LengthSpec(mean=float(np.mean(values)), max=float(x[-1]),
                          histogram=[(float(a), float(c)) for a, c in zip(x, counts)])

    out = {"isl": spec(tr.isl), "osl": spec(tr.osl), "isl_osl_mean": tr.isl_osl_mean}
    if tr.arrival_s is not None:
        out["arrival_dispersion"] = tr.arrival_dispersion
        states = tr.rate_states()
        if states is not None:
            out["arrival_states"] = states
    reuse = tr.prefix_reuse()
    if reuse is not None:
        out["prefix_share_fraction"], ws = reuse
        out["prefix_working_set_tokens"] = ws if ws > 0 else None
    return out
