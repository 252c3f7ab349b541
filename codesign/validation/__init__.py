"""Fidelity: simulate published measurements of real runs and report the error per case."""
