"""Errors at the scalar/CLI edge and reason codes inside arrays.

Inside the array path infeasibility is a value (a boolean mask plus a ``Reason`` code per point).
It becomes an exception only at the scalar API edge: ``SpecError`` for bad input (exit code 2),
``InfeasibleError`` for valid input that nothing satisfies (exit code 1).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Reason(IntEnum):
    """Why a configuration point is infeasible (0 = feasible)."""

    NONE = 0
    DIVISIBILITY = 1
    """The layout does not divide the model or the accelerators (heads, experts, layers, count)."""
    MEMORY = 2
    """Weights and reserve alone exceed usable accelerator memory."""
    KV_CAPACITY = 3
    """Weights fit but the KV cache for the batch at its context length does not."""
    SLO_TTFT = 4
    """p99 time to first token exceeds the scenario's limit."""
    SLO_TPOT = 5
    """p99 time per output token exceeds the scenario's limit."""
    SATURATED = 6
    """Offered load reaches or exceeds the service capacity (queue grows without bound)."""
    SLO_E2E = 7
    """p99 end-to-end latency exceeds the scenario's limit."""
    BATCH_LIMIT = 8
    """The batch exceeds a configured engine limit."""
    TOKEN_BUDGET = 9
    """A rank's prompt tokens per admission exceed the engine's per-iteration token budget
    (non-chunked prompts that do not fit block their rank)."""


class SpecError(ValueError):
    """Bad input: a file, a field path and what was expected. CLI exit code 2."""

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None):
        self.file = file
        self.path = path
        self.detail = message
        where = ": ".join(p for p in (file, path) if p)
        super().__init__(f"{where}: {message}" if where else message)


class InfeasibleError(RuntimeError):
    """Valid input, but no configuration fits or meets the SLO. CLI exit code 1."""

    def __init__(self, message: str, reasons: dict[str, int] | None = None):
        self.reasons = reasons or {}
        super().__init__(message)


def require(ok: np.ndarray, reason: np.ndarray, condition, code: Reason):
    """Narrow a feasibility mask, recording ``code`` where a point first fails.

    Parameters
    ----------
    ok, reason : arrays (broadcastable) of bool / int
    condition : bool array, broadcastable with ``ok``
    code : the Reason recorded for points failing ``condition`` that were still feasible

    Returns
    -------
    (ok, reason) broadcast to the common shape.
    """
    condition = np.asarray(condition, dtype=bool)
    newly_bad = ok & ~condition
    return ok & condition, np.where(newly_bad, int(code), reason)


def reason_counts(ok: np.ndarray, reason: np.ndarray) -> dict[str, int]:
    """Count infeasible points per reason name (for messages)."""
    reason = np.broadcast_to(reason, np.shape(ok))
    codes, counts = np.unique(reason[~np.asarray(ok, bool)], return_counts=True)
    return {Reason(int(c)).name: int(n) for c, n in zip(codes, counts)}
