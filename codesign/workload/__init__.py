"""Workload model: parameter counts, per-layer operators and their FLOPs/bytes."""
