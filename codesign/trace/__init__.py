"""Traces: Chakra execution-trace export and reader (ASTRA-sim), Chrome/Perfetto timelines."""
