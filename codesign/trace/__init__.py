"""Traces: Chakra execution-trace export and reader (ASTRA-sim), Chrome/Perfetto timelines.

* :mod:`codesign.trace.schema` — the Chakra ET schema (``et_def.proto``, kept in the repo) as
  protobuf message classes built at import, and the ``[varint length][message]`` framing;
* :mod:`codesign.trace.chakra` — :func:`~codesign.trace.chakra.export_chakra`: one
  ``PREFIX.<rank>.et`` per rank plus the communicator groups and ASTRA-sim's network, system and
  memory files (``codesign export chakra``); its jobs: the nodes of each stage from the step
  program (:mod:`~codesign.trace.chakra_nodes`), rank and group ids
  (:mod:`~codesign.trace.chakra_ranks`), the protobuf encoding
  (:mod:`~codesign.trace.chakra_encode`), ASTRA-sim's configuration files
  (:mod:`~codesign.trace.astra_config`);
* :mod:`codesign.trace.reader` — :func:`~codesign.trace.reader.summarize` a trace file or prefix
  (``codesign inspect``);
* :mod:`codesign.trace.perfetto` — the engine's timeline of a step (every micro-batch) as a
  Chrome trace (``codesign simulate --trace``), read from each task's step-program node.
"""
