"""The fit's Jacobian: one grouped finite difference, then secant updates along the optimizer's steps.

A finite-difference Jacobian of the residuals costs one evaluation per column group (columns whose
residual rows do not overlap are perturbed together; about 16 groups for the bundled fit, each
re-predicting most rows), and ``scipy.optimize.least_squares`` asks for one at every accepted
step. ``SecantJacobian`` forms it once and then corrects it from the residual change each step
actually produced (Schubert's sparse Broyden update: each row moves only in its own columns, so the
sparsity pattern is kept), for no further evaluation. A row whose parameters did not move keeps
its slopes. ``refresh`` re-forms the finite difference every so many updates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Residuals = Callable[[np.ndarray], np.ndarray]

JACOBIAN_KINDS = ("secant", "difference")
"""The fit's Jacobians: ``SecantJacobian``, or a grouped finite difference at every step (scipy's)."""


def column_groups(sparsity: np.ndarray) -> list[list[int]]:
    """Columns split into groups whose rows do not overlap (greedy, widest columns first), so one
    evaluation per group gives every column of the group its own rows' differences."""
    sparsity = np.asarray(sparsity, dtype=bool)
    order = sorted(range(sparsity.shape[1]), key=lambda j: (-int(sparsity[:, j].sum()), j))
    groups: list[list[int]] = []
    used: list[np.ndarray] = []
    for j in order:
        col = sparsity[:, j]
        for g, rows in zip(groups, used):
            if not np.any(rows & col):
                g.append(j)
                rows |= col
                break
        else:
            groups.append([j])
            used.append(col.copy())
    return [sorted(g) for g in groups]


def forward_difference(fun: Residuals, x: np.ndarray, f0: np.ndarray, sparsity: np.ndarray, step: float,
                       lower: float = 0.0, upper: float = 1.0, groups: list[list[int]] | None = None) -> np.ndarray:
    """Grouped one-sided difference of ``fun`` at ``x`` (``f0 = fun(x)``): each column stepped by
    ``step`` (away from the upper bound where the step would cross it), one ``fun`` call per group
    (``groups``: ``column_groups(sparsity)``, computed here when not given)."""
    sparsity = np.asarray(sparsity, dtype=bool)
    jac = np.zeros((f0.size, x.size))
    for group in groups if groups is not None else column_groups(sparsity):
        h = np.zeros_like(x)
        for j in group:
            h[j] = step if x[j] + step <= upper or x[j] - step < lower else -step
        df = fun(x + h) - f0
        for j in group:
            rows = sparsity[:, j]
            jac[rows, j] = df[rows] / h[j]
    return jac


class SecantJacobian:
    """A ``jac`` callable for ``least_squares``: the grouped finite difference at the first call
    (or every ``refresh`` updates), sparse Broyden (Schubert) updates between.

    ``tracked`` wraps the residual function so that the Jacobian reads the residuals the optimizer
    already evaluated at a point (``least_squares`` calls ``jac(x)`` after ``fun(x)``); ``initial``
    is a Jacobian to start the updates from (a previous pass's), in place of the first difference.
    """

    def __init__(self, fun: Residuals, sparsity: np.ndarray, step: float, *, refresh: int | None = None,
                 initial: np.ndarray | None = None):
        self._fun = fun
        self.sparsity = np.asarray(sparsity, dtype=bool)
        self.groups = column_groups(self.sparsity)
        self.step = float(step)
        self.refresh = refresh
        self.jac = None if initial is None else np.array(initial, dtype=float)
        self.x: np.ndarray | None = None
        self.f: np.ndarray | None = None
        self.updates = 0
        self.differences = 0
        self._last: tuple[bytes, np.ndarray] | None = None

    def restart(self) -> None:
        """Form the finite difference again at the next call."""
        self.jac, self.x, self.f, self.updates = None, None, None, 0

    def tracked(self, x: np.ndarray) -> np.ndarray:
        """``fun(x)``, remembered for the Jacobian call that may follow at the same point."""
        f = np.asarray(self._fun(x), dtype=float)
        self._last = (np.asarray(x, dtype=float).tobytes(), f)  # only the last point is ever asked for
        return f

    def _residuals_at(self, x: np.ndarray) -> np.ndarray:
        return self._last[1] if self._last is not None and self._last[0] == x.tobytes() else self.tracked(x)

    def __call__(self, x: np.ndarray, *_) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        f = self._residuals_at(x)
        stale = self.refresh is not None and self.updates >= self.refresh
        if self.jac is None or stale:
            self.jac = forward_difference(self._fun, x, f, self.sparsity, self.step, groups=self.groups)
            self.differences += 1
            self.updates = 0
        elif self.x is not None:
            self.jac = schubert_update(self.jac, self.sparsity, x - self.x, f - self.f)
            self.updates += 1
        self.x, self.f = x.copy(), f.copy()
        return self.jac.copy()


def schubert_update(jac: np.ndarray, sparsity: np.ndarray, dx: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Sparse Broyden update: the least change of each row, within its own columns, that makes the
    Jacobian reproduce the residual change ``df`` of the step ``dx`` (Schubert 1970). Rows none of
    whose columns moved are kept."""
    s = np.where(sparsity, dx[None, :], 0.0)
    norm = np.einsum("ij,ij->i", s, s)
    miss = df - jac @ dx
    move = norm > 1e-12 * max(float(dx @ dx), 1e-300)
    out = jac.copy()
    out[move] += (miss[move] / norm[move])[:, None] * s[move]
    return out


__all__ = ["JACOBIAN_KINDS", "SecantJacobian", "column_groups", "forward_difference", "schubert_update"]
