"""Catalog packages: the YAML files of ``hardware/``, ``topologies/``, ``workloads/`` and
``experiments/`` at the repository root, mapped into the installed package by pyproject."""
