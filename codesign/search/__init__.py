"""Parallelism search: enumerate plans, rank them with a fast analytical estimate from the
same cost models, and confirm the best with the engine."""
