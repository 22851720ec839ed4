"""Non-LLM MLPerf workloads: text-to-video diffusion (WAN-2.2) and generative recommendation
(DLRMv3). Costs come from the same roofline and collective models as the LLM path."""

from .cli_support import derived_rows, handles, is_workload_spec, profile_row, reject_llm_flags, tables
from .predict import WorkloadPrediction, is_workload_model, predict
from .validate import is_metric_csv, validate_metric_csv
from .validate import render as render_validation

__all__ = ["predict", "is_workload_model", "WorkloadPrediction", "handles", "reject_llm_flags", "tables", "is_workload_spec", "profile_row", "derived_rows",
           "is_metric_csv", "validate_metric_csv", "render_validation"]
