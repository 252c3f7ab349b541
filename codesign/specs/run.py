"""A training run: what (model), how (plan) and where (GPU, topology, GPU count)."""

from __future__ import annotations

from pydantic import Field

from codesign.specs.base import Spec
from codesign.specs.gpu import GpuSpec
from codesign.specs.model import ModelSpec
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.topology import TopologySpec


class TrainingRun(Spec):
    """Everything one training-step simulation needs."""

    model: ModelSpec
    gpu: GpuSpec
    topology: TopologySpec
    parallel: ParallelismSpec
    num_gpus: int = Field(ge=1)

    @property
    def seq_len(self) -> int:
        return self.parallel.seq_len or self.model.seq_len

    @property
    def dp(self) -> int:
        """Data-parallel size: given, or GPUs / (tp × pp × cp)."""
        p = self.parallel
        return p.dp if p.dp is not None else self.num_gpus // (p.tp * p.pp * p.cp)
