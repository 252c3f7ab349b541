"""Batching schedulers, one module each, behind a registry."""
