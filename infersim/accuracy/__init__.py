"""Accuracy: predict published MLPerf rows, summarise the error, fit and cross-validate the few
named free parameters, and write fitted values with provenance.

Modules, in data-flow order: ``data`` (rows, frontier, preset rounds), ``runner`` (predictions
through :func:`infersim.api.predict` with spec and preset objects; ``validate``), ``summary`` and
``plot`` (reports), ``params`` (parameters and their physical ranges), ``fit`` (``calibrate``),
``cv`` (``cross_validate``), ``yamledit`` and ``write`` (comment-keeping YAML output), ``progress``.
"""

from .cv import FOLD_KINDS, cross_validate, format_cv, transfer_prior
from .data import (REQUIRED_COLUMNS, PredictionKey, Row, bundled_data, frontier_mask, load_rows, make_row,
                   preset_rounds, resolve_preset)
from .fit import CV_MAX_NFEV, DEFAULT_PARAMETERS, JACOBIAN, ROUND_PARAMETERS, calibrate
from .jacobian import JACOBIAN_KINDS
from .params import HARDWARE_RANGES, ROUND_FACTORS, parse_parameters
from .plot import plot, plot_cv, write_text
from .progress import LineProgress, Progress, RichProgress, for_stderr
from .result import CalibrationResult
from .runner import Runner, validate
from .summary import RowResult, ValidationReport, summarize
from .write import check_out_dir, write

__all__ = ["parse_parameters", "REQUIRED_COLUMNS", "Row", "RowResult", "ValidationReport", "PredictionKey", "CalibrationResult", "Runner",
           "Progress", "LineProgress", "RichProgress", "for_stderr", "bundled_data", "load_rows", "make_row",
           "frontier_mask", "preset_rounds", "resolve_preset", "summarize", "validate", "plot", "plot_cv", "write_text",
           "calibrate", "CV_MAX_NFEV", "JACOBIAN", "JACOBIAN_KINDS", "cross_validate", "format_cv", "transfer_prior", "write", "check_out_dir",
           "DEFAULT_PARAMETERS", "ROUND_PARAMETERS", "HARDWARE_RANGES", "ROUND_FACTORS", "FOLD_KINDS"]
