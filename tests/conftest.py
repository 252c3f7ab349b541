"""Shared fixtures: tiny specs with round numbers for hand-computed checks."""

from __future__ import annotations

import pytest

from codesign.specs import (
    ComputeEfficiency,
    FullFlatTopology,
    GpuSpec,
    ModelSpec,
    ParallelismSpec,
    TrainingRun,
)


def ideal_gpu(**over: object) -> GpuSpec:
    """A GPU with efficiency 1, no kernel overhead and no host issue cost: times follow the
    roofline exactly."""
    data: dict[str, object] = dict(
        name="ideal", vendor="test", peak_tflops={"bf16": 100.0, "fp8": 200.0},
        hbm_capacity_GB=1000.0, hbm_bandwidth_TBps=1.0, scale_up_bandwidth_GBps=100.0,
        default_topology="dgx-h100",
        efficiency=ComputeEfficiency(gemm_max=1.0, gemm_half_dim=0.0, attention_fwd=1.0,
                                     attention_bwd=1.0, memory_bound=1.0,
                                     kernel_overhead_us=0.0, host_issue_us=0.0))
    data.update(over)
    return GpuSpec.model_validate(data)


def fast_network(bandwidth_GBps: float = 1e12, latency_us: float = 0.0) -> FullFlatTopology:
    return FullFlatTopology(name="flat", bandwidth_GBps=bandwidth_GBps, latency_us=latency_us)


def tiny_model(**over: object) -> ModelSpec:
    data: dict[str, object] = dict(name="tiny", num_layers=4, hidden_size=256, num_heads=4,
                                   ffn_hidden_size=1024, vocab_size=1000, seq_len=128,
                                   mlp="plain", norm="layernorm")
    data.update(over)
    return ModelSpec.model_validate(data)


def tiny_run(num_gpus: int = 2, model: ModelSpec | None = None, **plan: object) -> TrainingRun:
    return TrainingRun(model=model or tiny_model(), gpu=ideal_gpu(), topology=fast_network(),
                       parallel=ParallelismSpec.model_validate(plan), num_gpus=num_gpus)


@pytest.fixture
def run_factory():  # type: ignore[no-untyped-def]
    return tiny_run
