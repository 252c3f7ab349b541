"""Reports: metrics and tables from simulation results (no I/O)."""

from codesign.report.training import BREAKDOWN_KEYS, TrainingReport, format_table

__all__ = ["BREAKDOWN_KEYS", "TrainingReport", "format_table"]
