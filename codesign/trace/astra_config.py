"""ASTRA-sim configuration files for an exported Chakra trace: the analytical network
(``PREFIX.network.yml``), the system layer (``PREFIX.system.json``) and the memory
(``PREFIX.memory.json``).

The network is a scale-up ``Switch`` of the domain size, then a scale-out ``Switch`` over the
domains (one ``Switch`` for FullFlat or when every GPU fits in one domain); the system layer
replays the trace's compute durations with ring collectives per dimension; there is no remote
memory.
"""

from __future__ import annotations

from typing import Any

from codesign import __version__
from codesign.errors import SpecError
from codesign.specs.run import TrainingRun
from codesign.specs.topology import FullFlatTopology
from codesign.units import GB, TFLOPS

#: ASTRA-sim's memory file: no remote memory expansion
MEMORY_JSON: dict[str, Any] = {"memory-type": "NO_MEMORY_EXPANSION"}


def network_dims(topology: Any, world: int) -> int:
    """Dimensions of the exported ASTRA-sim network (1: one switch; 2: scale-up + out)."""
    if isinstance(topology, FullFlatTopology) or world <= topology.scale_up.domain_size:
        return 1
    return 2


def network_yaml(run: TrainingRun, world: int) -> str:
    """ASTRA-sim analytical network file (YAML) for the run's topology."""
    topo = run.topology
    lines = [f"# ASTRA-sim analytical network for codesign topology '{topo.name}', "
             f"{world} GPUs (written by codesign {__version__})"]
    if isinstance(topo, FullFlatTopology):
        lines += ["# FullFlat: one switch, the same bandwidth between every pair of GPUs",
                  "topology: [ Switch ]", f"npus_count: [ {world} ]",
                  f"bandwidth: [ {topo.bandwidth_GBps:g} ]  # GB/s per GPU per direction",
                  f"latency: [ {topo.latency_us * 1e3:g} ]  # ns"]
        return "\n".join(lines) + "\n"
    up, out = topo.scale_up, topo.scale_out
    if network_dims(topo, world) == 1:
        lines += ["# every GPU in one scale-up domain",
                  "topology: [ Switch ]", f"npus_count: [ {world} ]",
                  f"bandwidth: [ {up.bandwidth_GBps:g} ]  # GB/s per GPU per direction",
                  f"latency: [ {up.latency_us * 1e3:g} ]  # ns"]
        return "\n".join(lines) + "\n"
    d = up.domain_size
    out_bw = out.nic_bandwidth_Gbps / 8.0
    out_lat_ns = (out.latency_us + out.hop_latency_us * (2 * out.switch_tiers - 1)) * 1e3
    lines += [f"# dim 0: scale-up domain of {d} GPUs; dim 1: scale-out fat-tree, one "
              f"{out.nic_bandwidth_Gbps:g} Gb/s NIC per GPU",
              "# (ASTRA-sim has no oversubscription or message-size efficiency: "
              "codesign's are left out)",
              "topology: [ Switch, Switch ]", f"npus_count: [ {d}, {world // d} ]",
              f"bandwidth: [ {up.bandwidth_GBps:g}, {out_bw:g} ]  # GB/s per GPU per direction",
              f"latency: [ {up.latency_us * 1e3:g}, {out_lat_ns:g} ]  # ns"]
    return "\n".join(lines) + "\n"


def system_json(run: TrainingRun, world: int) -> dict[str, Any]:
    """ASTRA-sim system-layer config: replay the trace's compute durations (roofline off;
    ``peak-perf``/``local-mem-bw`` are the GPU's, for those who switch it on)."""
    dims = network_dims(run.topology, world)
    impl = ["ring"] * dims
    return {
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4, "all-reduce-implementation": impl,
        "all-gather-implementation": impl, "reduce-scatter-implementation": impl,
        "all-to-all-implementation": impl, "collective-optimization": "localBWAware",
        "local-mem-bw": run.gpu.hbm_bytes_per_s / GB, "boost-mode": 0, "roofline-enabled": 0,
        "peak-perf": run.gpu.peak_flops(run.parallel.dtype) / TFLOPS,
    }


def check_network(run: TrainingRun, world: int) -> None:
    """Refuse a GPU count the two-dimension network file cannot describe."""
    topo = run.topology
    if network_dims(topo, world) == 2:
        d = topo.scale_up.domain_size  # type: ignore[union-attr]
        if world % d:
            raise SpecError(f"num_gpus: ASTRA-sim's network file needs the GPU count ({world}) "
                            f"to be a multiple of the scale-up domain size ({d}) of topology "
                            f"'{topo.name}'")
