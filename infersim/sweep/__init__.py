"""Sweeps over named axes, streamed to Parquet/CSV, locally or on a Dask cluster."""

from .cells import COLUMNS, evaluate_cell
from .runner import SweepSummary, run
from .spec import BatchRange, Cell, SweepSpec, load_sweep

__all__ = ["COLUMNS", "BatchRange", "Cell", "SweepSpec", "SweepSummary", "evaluate_cell", "load_sweep", "run"]
