"""Reports: metrics and tables from simulation results (no I/O).

:mod:`~codesign.report.metrics` computes the training report (MFU, HFU, tokens/s, TFLOP/s per
GPU, memory) from a simulated step, :mod:`~codesign.report.expanded` the per-rank report and
its ``expanded`` section, :mod:`~codesign.report.training` holds the report type and the table.
"""

from codesign.report.metrics import training_report
from codesign.report.training import BREAKDOWN_KEYS, TrainingReport, format_table

__all__ = ["BREAKDOWN_KEYS", "TrainingReport", "format_table", "training_report"]
