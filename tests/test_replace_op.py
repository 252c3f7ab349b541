"""``replace_op`` (the training graph's fast operator copy) equals ``dataclasses.replace``."""

from __future__ import annotations

import dataclasses

import pytest

import codesign.workload.training as workload_training
from codesign.api import build_run
from codesign.ir import Op, replace_op
from codesign.workload.training import build_training_graph


def test_replace_op_equals_dataclasses_replace() -> None:
    op = Op(name="qkv", kind="gemm", category="forward", layer=3, flops=1e9, mnk=(1, 2, 3))
    for changes in ({"layer": 7}, {"category": "recompute"}, {"layer": 0, "bytes": 5.0}):
        fast, slow = replace_op(op, **changes), dataclasses.replace(op, **changes)
        assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert op.layer == 3  # the original is untouched
    with pytest.raises(TypeError, match="lyr"):
        replace_op(op, lyr=1)


@pytest.mark.parametrize("plan", [dict(tp=8, pp=8, recompute="full"),
                                  dict(tp=8, pp=4, vpp=2, recompute="selective",
                                       sequence_parallel=True, zero_stage=3)])
def test_training_graph_is_the_same_with_either_copy(plan: dict[str, object],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = build_run(model="llama3-8b", gpu="h100", num_gpus=64, micro_batch_size=1,
                    global_batch_size=64, **plan)
    fast = build_training_graph(run)
    monkeypatch.setattr(workload_training, "replace_op",
                        lambda op, **changes: dataclasses.replace(op, **changes))
    assert build_training_graph(run) == fast


@pytest.mark.parametrize("model,gpu,num_gpus,plan", [
    ("megatron-1t", "a100", 3072, dict(tp=8, pp=64, recompute="full")),
    ("deepseek-v3", "h100", 1024, dict(tp=1, pp=16, ep=64, sequence_parallel=False)),
    ("llama3-70b", "h100", 64, dict(tp=8, pp=4, vpp=5, recompute="selective")),
    ("mixtral-8x7b", "h100", 64, dict(tp=2, pp=4, vpp=2, ep=8, recompute="full",
                                      recompute_num_layers=1)),
])
def test_chunks_repeating_layers_are_bound_once_and_equal(
        model: str, gpu: str, num_gpus: int, plan: dict[str, object],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk whose layers repeat an earlier chunk's (same kinds, dtypes, recompute and
    parameters) holds that chunk's operators relabeled; the graph, its memory and the step
    time equal binding every chunk on its own."""
    from codesign import simulate
    from codesign.ir import RelabeledOps

    kwargs = dict(model=model, gpu=gpu, num_gpus=num_gpus, micro_batch_size=1,
                  global_batch_size=num_gpus // 2, **plan)
    run = build_run(**kwargs)
    shared = build_training_graph(run)
    reused = [c for c in shared.chunks if c.same_ops_as >= 0]
    assert reused and all(isinstance(c.forward, RelabeledOps) for c in reused)
    assert all(c.same_ops_as < c.virtual_stage for c in reused)
    fast = simulate(**kwargs)
    # every chunk its own key: each is bound on its own, nothing relabeled
    monkeypatch.setattr(workload_training.ChunkBinder, "chunk_key",
                        lambda self, layers, first, last: (layers, first, last))
    alone = build_training_graph(run)
    assert not any(c.same_ops_as >= 0 for c in alone.chunks)
    for a, b in zip(shared.chunks, alone.chunks, strict=True):
        assert tuple(a.forward) == tuple(b.forward) and tuple(a.backward) == tuple(b.backward)
        assert (a.layers, a.layer_params, a.layer_saved, a.comm_peak_bytes) == (
            b.layers, b.layer_params, b.layer_saved, b.comm_peak_bytes)
    slow = simulate(**kwargs)
    assert fast.step_time_s == slow.step_time_s
    assert fast.memory_gib == slow.memory_gib
