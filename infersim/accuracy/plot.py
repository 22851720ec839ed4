"""Predicted vs published plot of a validation, and atomic text output."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from ..errors import SpecError
from ..report import write_atomic
from .summary import ValidationReport, fmt

PLOT_FORMATS = ("png", "svg", "pdf")
"""File types the plot can be written as (chosen by the suffix)."""


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    if Path(path).is_dir():
        raise SpecError("is a folder; expected a file name", file=str(path))
    return write_atomic(Path(path), text.encode("utf-8"))


def _plot_target(path: str | os.PathLike) -> tuple[Path, str]:
    """(path, file type) of a plot to write: a known suffix (.png when none), not a folder."""
    path = Path(path)
    kind = (path.suffix.lstrip(".") or "png").lower()
    if kind not in PLOT_FORMATS:
        raise SpecError(f"plot file type '.{kind}' not supported (expected .png, .svg or .pdf)", file=str(path))
    if path.is_dir():
        raise SpecError("is a folder; expected a plot file name", file=str(path))
    return path, kind


def identity_bands(ax, lo: float, hi: float, label: str | None = None) -> None:
    """The y = x line over [lo, hi] with its ±10 % and ±25 % bands (log-log predicted vs measured)."""
    xs = np.geomspace(lo, hi, 64)
    ax.fill_between(xs, xs / 1.25, xs * 1.25, color="0.9", lw=0, label="±25 %")
    ax.fill_between(xs, xs / 1.10, xs * 1.10, color="0.78", lw=0, label="±10 %")
    ax.plot(xs, xs, color="0.3", lw=1, label=label)


def plot(report: ValidationReport, path: str | os.PathLike, *, color_by: str = "model",
         title: str | None = None) -> Path:
    """Predicted vs published tokens/s, log-log, one colour per model (or hardware).

    Draws the y = x line with ±10 % and ±25 % bands; frontier rows are large outlined markers,
    other rows small and translucent. Rows without a prediction are counted in the title. The
    file type follows the suffix (``.png``, ``.svg``, ``.pdf``); written atomically.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if color_by not in ("model", "hardware", "scenario", "version"):
        raise SpecError(f"color_by must be model, hardware, scenario or version (got '{color_by}')")
    path, kind = _plot_target(path)
    ok = [r for r in report.results if r.predicted is not None]
    fig = Figure(figsize=(7.5, 6.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    values = [v for r in ok for v in (r.row.tokens_per_s, r.predicted)]
    lo, hi = (min(values) / 2, max(values) * 2) if values else (1.0, 1e6)
    identity_bands(ax, lo, hi, label="y = x")
    groups = sorted({getattr(r.row, color_by) for r in ok})
    cmap = fig.colormaps["tab10"] if hasattr(fig, "colormaps") else None
    if cmap is None:
        import matplotlib

        cmap = matplotlib.colormaps["tab10"]
    for gi, g in enumerate(groups):
        color = cmap(gi % 10)
        back = [r for r in ok if getattr(r.row, color_by) == g and not r.frontier]
        top = [r for r in ok if getattr(r.row, color_by) == g and r.frontier]
        if back:
            ax.scatter([r.row.tokens_per_s for r in back], [r.predicted for r in back], s=12, color=color, alpha=0.35,
                       lw=0)
        ax.scatter([r.row.tokens_per_s for r in top], [r.predicted for r in top], s=36, color=color,
                   edgecolors="black", linewidths=0.6, label=str(g))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published output tokens/s (system)")
    ax.set_ylabel("predicted output tokens/s (system)")
    s = report.summary
    head = title or "infersim vs MLPerf Inference"
    ax.set_title(f"{head}\nfrontier median APE {fmt(s['frontier_median_ape'])} %, p90 {fmt(s['frontier_p90_ape'])} %"
                 f"; all {fmt(s['median_ape'])} % / {fmt(s['p90_ape'])} %"
                 + (f"; {s['n_failed']} rows not predicted" if s["n_failed"] else ""), fontsize=9)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(loc="upper left", fontsize=8, title=f"{color_by} (outlined: frontier)", title_fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=kind)
    return write_atomic(path, buf.getvalue())


def plot_cv(cv: dict, path: str | os.PathLike) -> Path:
    """Held-out error of a cross-validation (``cross_validate``'s result), one panel per fold kind.

    Each held-out frontier row at its published tokens/s (log) against predicted / published (log),
    coloured by the fold that held it out, with the ±10 % and ±25 % bands and the pooled median and
    p90 absolute error in the panel title: where a table gives the figures, this shows which folds
    and which sizes of system carry them. The file type follows the suffix; written atomically.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path, kind = _plot_target(path)
    blocks = [(k, b) for k, b in cv.items() if isinstance(b, dict) and "held_out" in b]
    if not blocks:
        raise SpecError("no cross-validation folds to plot (expected leave_one_*_out blocks with held_out rows)")
    fig = Figure(figsize=(5.2 * len(blocks), 5.0), dpi=110)
    FigureCanvasAgg(fig)
    import matplotlib
    import matplotlib.ticker

    cmap = matplotlib.colormaps["tab10"]
    field = {"leave_one_round_out": "version", "leave_one_model_out": "model", "leave_one_hardware_out": "hardware"}
    for i, (name, block) in enumerate(blocks):
        ax = fig.add_subplot(1, len(blocks), i + 1)
        rows = [r for r in block["held_out"] if r.get("predicted_tokens_per_s")]
        pub = [r["published_tokens_per_s"] for r in rows]
        lo, hi = (min(pub) / 1.5, max(pub) * 1.5) if pub else (1.0, 1e6)
        ax.axhspan(1 / 1.25, 1.25, color="0.9", lw=0, label="±25 %")
        ax.axhspan(1 / 1.10, 1.10, color="0.78", lw=0, label="±10 %")
        ax.axhline(1.0, color="0.3", lw=1)
        key = field.get(name, "version")
        groups = sorted({r[key] for r in rows})
        for gi, g in enumerate(groups):
            sel = [r for r in rows if r[key] == g]
            ax.scatter([r["published_tokens_per_s"] for r in sel],
                       [r["predicted_tokens_per_s"] / r["published_tokens_per_s"] for r in sel],
                       s=26, color=cmap(gi % 10), edgecolors="black", linewidths=0.5, label=str(g))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(1 / 2.5, 2.5)
        ax.set_yticks([0.5, 0.75, 1.0, 1.33, 2.0])
        ax.set_yticklabels(["0.5", "0.75", "1", "1.33", "2"])
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("published output tokens/s (system)")
        if i == 0:
            ax.set_ylabel("predicted / published (held out)")
        n_out = sum(1 for r in rows if not 1 / 2.5 <= r["predicted_tokens_per_s"] / r["published_tokens_per_s"] <= 2.5)
        n_none = len(block["held_out"]) - len(rows)  # no prediction (infeasible) or 0: not drawable
        notes = ([f"{n_out} beyond the axis"] if n_out else []) + ([f"{n_none} not predicted"] if n_none else [])
        ax.set_title(f"{name.replace('_', ' ')}: median {fmt(block.get('median_ape'))} %, p90 "
                     f"{fmt(block.get('p90_ape'))} %" + (f"\n(rows: {'; '.join(notes)})" if notes else ""), fontsize=9)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(loc="lower left", fontsize=7, title=f"held-out {key}", title_fontsize=7, ncol=2)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=kind)
    return write_atomic(path, buf.getvalue())


__all__ = ["plot", "plot_cv", "identity_bands", "write_text", "PLOT_FORMATS"]
