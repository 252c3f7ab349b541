"""Step cost of an inference engine: the time of one forward pass over a mixed batch of
prefill chunks and decoding requests, priced by the same compute and network models as
training.

:class:`StepCostModel` binds the inference operators (:mod:`codesign.workload.inference`) and
prices them: compute operators with :class:`~codesign.hardware.compute.ComputeModel` (roofline ×
the GPU catalog's efficiencies + kernel overhead; GEMMs with small ``m`` read the weights at
the weight dtype, so small-batch decode is bandwidth-bound), collectives with
:class:`~codesign.network.model.NetworkModel` on the engine's layout (TP innermost, then EP,
then PP; blocking: inference kernels wait for their all-reduce). A step's time is the sum over
pipeline stages (the latency of one batch through the engine); :meth:`stage_times_s` gives the
stages separately (with ``pp`` batches in flight, the slowest stage bounds the step rate).

Speed. The time splits into a part that depends only on the step's new tokens (GEMMs, norms,
MoE, collectives, embedding, p2p: cached per token count), a head part that depends only on
the number of requests (cached), and the attention kernels, priced per call from the step's
sums (:class:`~codesign.workload.inference.StepShape`). Token counts up to ``EXACT_TOKENS``
are priced exactly; above, the token part is interpolated linearly between cached grid points
``EXACT_TOKENS·2^(i/GRID_PER_OCTAVE)`` (2.2 % apart). Between grid points the token part is
piecewise linear in the token count (a GEMM's time ``2mnk/(peak·eff·m/(m+h))`` and its bytes
are linear in ``m``, as are collective times with the size-efficiency curve), except where a
kernel switches between compute- and memory-bound and for the MoE expert-activation curve; the
interpolation error is below 1e-4 of the step time on dense and MoE catalog models
(``tests/test_inference.py`` asserts < 1e-3 against operator-by-operator pricing).
Attention is priced in closed form per call from the compute model's roofline rates
(:meth:`StepCostModel._attention_pricer`). About 10 us per call.

Decode-only steps: CUDA-graph replay and DeepEP's low-latency all-to-all across nodes are
priced by a variant of the model (:mod:`codesign.serving.decode_kernels`); the all-reduce +
norm fusion by :mod:`codesign.serving.fusion`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from codesign.errors import InfeasiblePlan
from codesign.hardware.compute import ComputeModel, op_overhead_us
from codesign.ir import Op
from codesign.network.model import NetworkModel
from codesign.serving.decode_kernels import (
    DEEPEP_LL_LATENCY_US,
    DEEPEP_LL_NIC_FRACTION,
    captured,
    deepep_all_to_all_s,
    deepep_parameters,
    graph_compute,
)
from codesign.serving.fusion import layer_seconds
from codesign.specs.gpu import GpuSpec
from codesign.specs.inference import InferencePlan
from codesign.specs.model import ModelSpec
from codesign.specs.parallel import ParallelismSpec
from codesign.specs.serving_engine import (
    DEFAULT_KV_FRACTION,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_MAX_NUM_TOKENS,
)
from codesign.specs.topology import FullFlatTopology, TwoTierTopology
from codesign.units import GB, US
from codesign.workload.inference import InferenceWorkload, StepShape, inference_problems
from codesign.workload.ssm import state_bytes_per_sequence

__all__ = ["CUSTOM_ALLREDUCE_HOPS", "CUSTOM_ALLREDUCE_LATENCY_US",
           "CUSTOM_ALLREDUCE_REF_LATENCY_US", "DEEPEP_LL_LATENCY_US",
           "DEEPEP_LL_NIC_FRACTION", "DEFAULT_KV_FRACTION", "DEFAULT_MAX_NUM_TOKENS",
           "EXACT_TOKENS", "GRID_PER_OCTAVE", "InferencePlan", "StepCostModel", "StepShape"]

#: token counts up to this are priced exactly (every decode batch of practical size)
EXACT_TOKENS = 256
#: cached grid points per doubling of the token count above ``EXACT_TOKENS``
GRID_PER_OCTAVE = 32
#: Kernel efficiencies in inference: the microbenchmark figures of the GPU catalog. The
#: catalog's ``sustained_fraction`` is fitted to end-to-end *training* steps (hours at the
#: power limit, plus every training-only loss the model leaves out) and is not applied;
#: pass ``sustained_fraction=`` to :meth:`StepCostModel.build` to override.
INFERENCE_SUSTAINED_FRACTION = 1.0
#: Intra-node TP all-reduce in inference engines: TensorRT-LLM / vLLM / SGLang run small and
#: mid-size all-reduces with custom one-/two-shot kernels over NVLink peer memory instead of
#: NCCL. Priced as ``latency + 2(n-1)/n · S / (fraction × scale-up bandwidth)``, whichever of
#: that and the NCCL model of the network is faster. Least-squares fit (relative error) to
#: the TensorRT-LLM custom all-reduce kernels measured on H100 SXM (NVLink4, 450 GB/s per
#: direction) for tp 2/4/8 and 2 KB-4 MB (sgl-project/sglang PR #2904, 'custom allreduce'
#: table, e.g. tp8: 5.9 us at 2 KB, 16.7 us at 1 MB, 33.8 us at 4 MB): 4.3 us and 0.51;
#: the fit is within ±15 % for most points, ±32 % at worst.
CUSTOM_ALLREDUCE_LATENCY_US = 4.3
CUSTOM_ALLREDUCE_BW_FRACTION = 0.51
#: The fitted latency holds the scale-up latency of the system it was measured on
#: (``scale_up.latency_us`` of topologies/dgx-h100.yaml, NCCL's per-step NVLink latency, 1.9
#: us) ``CUSTOM_ALLREDUCE_HOPS`` times: a one-shot kernel's start barrier (a flag written to
#: every peer, then polled) and its data exchange (peers' buffers read over NVLink) each cross
#: the domain once (ASSUMPTION read off the kernel's structure: TensorRT-LLM
#: cpp/tensorrt_llm/kernels/customAllReduceKernels.cu, oneShotAllReduceKernel, the one used
#: for the small messages of decode; the other 0.5 us are launch and reduction). A topology
#: whose scale-up latency differs by Δ pays ``CUSTOM_ALLREDUCE_HOPS · Δ`` more per call, so
#: the link latency reaches decode steps; on every topology at 1.9 us (all of the catalog's)
#: the price is the fit, unchanged.
CUSTOM_ALLREDUCE_REF_LATENCY_US = 1.9
CUSTOM_ALLREDUCE_HOPS = 2


def _grid(i: int) -> float:
    return EXACT_TOKENS * 2.0 ** (i / GRID_PER_OCTAVE)


@dataclass
class StepCostModel:
    """Prices engine steps (seconds) for one model, GPU, topology and plan.

    Build with :meth:`build`. Attributes (per GPU unless stated):

    * ``kv_bytes_per_token``: KV-cache bytes one token occupies on a GPU (after TP/PP split).
    * ``weight_bytes_per_gpu``: weights on the most loaded GPU (pipeline stage).
    * ``activation_bytes``: activation workspace reserved for ``max_num_tokens`` tokens.
    * ``state_bytes``: recurrent state of the Mamba layers reserved for ``max_num_seqs``
      sequences (0 without Mamba layers): a fixed slot per sequence, whatever its length, as
      vLLM's ``MambaCacheManager`` and TensorRT-LLM's ``MambaHybridCacheManager`` allocate
      them before the KV cache.
    * ``kv_capacity_tokens``: tokens the whole engine can cache: ``ep × (HBM − weights −
      activations − state) × kv_fraction / kv_bytes_per_token`` (each of the ``ep`` replicas
      caches its own requests); only attention layers hold KV.
    """

    workload: InferenceWorkload
    compute: ComputeModel
    network: NetworkModel
    kv_fraction: float = DEFAULT_KV_FRACTION
    max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS
    custom_allreduce: bool = True
    cuda_graph_sizes: tuple[int, ...] = ()
    cuda_graph_padding: bool = False
    deepep_low_latency: bool = False
    fused_allreduce_norm: bool = False
    host_step_overhead_us: float = 0.0
    #: price EP all-to-alls across nodes as DeepEP low-latency kernels (decode variants)
    ll_all_to_all: bool = False
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    kv_bytes_per_token: float = field(init=False)
    state_bytes: float = field(init=False)
    weight_bytes_per_gpu: float = field(init=False)
    activation_bytes: float = field(init=False)
    kv_capacity_tokens: int = field(init=False)
    _custom_bw: float = field(init=False, default=0.0)
    _custom_alpha_s: float = field(init=False, default=0.0)
    _stage_layers: list[int] = field(init=False, default_factory=list)
    _mla: bool = field(init=False, default=False)
    _reread: float = field(init=False, default=1.0)
    _pricers: dict[tuple[bool, bool], tuple[float, float, float, float]] = field(
        init=False, default_factory=dict)
    _tok_cache: dict[float, tuple[float, ...]] = field(init=False, default_factory=dict)
    _head_cache: dict[float, float] = field(init=False, default_factory=dict)
    _variants: dict[bool, StepCostModel] = field(init=False, default_factory=dict)
    _ll: tuple[float, float] = field(init=False, default=(0.0, 0.0))

    @classmethod
    def build(cls, model: ModelSpec, gpu: GpuSpec,
              topology: TwoTierTopology | FullFlatTopology, plan: InferencePlan, *,
              kv_fraction: float = DEFAULT_KV_FRACTION,
              max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS,
              sustained_fraction: float | None = None,
              custom_allreduce: bool = True,
              cuda_graph_sizes: Sequence[int] = (),
              cuda_graph_padding: bool = False,
              deepep_low_latency: bool = False,
              fused_allreduce_norm: bool = False,
              host_step_overhead_us: float = 0.0,
              max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> StepCostModel:
        """Bind and price ``model`` on ``plan``. Raises :class:`InfeasiblePlan` when the plan
        does not fit the model (heads, experts, layers, dtype) or the weights do not fit.

        ``kv_fraction``: share of the HBM left after weights and activations given to the KV
        cache; ``max_num_tokens``: tokens per step the activation workspace is sized for;
        ``sustained_fraction``: GEMM/attention efficiency factor (None: 1, see
        :data:`INFERENCE_SUSTAINED_FRACTION`); ``custom_allreduce``: price intra-node TP
        all-reduces with the custom-kernel model too (:data:`CUSTOM_ALLREDUCE_LATENCY_US`,
        moved by the topology's scale-up latency: :data:`CUSTOM_ALLREDUCE_HOPS`);
        ``cuda_graph_sizes`` / ``cuda_graph_padding``: decode batches (sequences per replica)
        replayed from captured CUDA graphs (module docstring; empty: every step eager);
        ``deepep_low_latency``: decode steps' EP all-to-alls across nodes as DeepEP's
        low-latency kernels (module docstring); ``fused_allreduce_norm``: TP all-reduces on
        the custom kernel absorb the residual add and RMSNorm after them
        (:mod:`codesign.serving.fusion`); ``host_step_overhead_us``: host time per step the
        GPU waits for (scheduling, input preparation, reading back the sampled tokens), on
        the first stage; 0: hidden behind the GPU (overlap schedulers);
        ``max_num_seqs``: sequences per replica whose Mamba state is reserved."""
        problems = inference_problems(model, plan, gpu.peak_tflops)
        if not model.attention_layers:
            problems.append(f"{model.name} has no attention layers: serving is modelled with "
                            "a KV cache counted in tokens, which such a model does not have")
        if problems:
            raise InfeasiblePlan("; ".join(problems))
        workload = InferenceWorkload(model, plan, plan.gemm_dtype(gpu.peak_tflops))
        fraction = INFERENCE_SUSTAINED_FRACTION if sustained_fraction is None \
            else sustained_fraction
        eff = gpu.efficiency.model_copy(update={"sustained_fraction": fraction})
        compute = ComputeModel.from_gpu(gpu.model_copy(update={"efficiency": eff}))
        tables = compute.tables.collectives if compute.tables is not None else None
        par = ParallelismSpec(tp=plan.tp, pp=plan.pp, ep=plan.ep, dp=plan.ep)
        network = NetworkModel.from_parallelism(topology, par, dp=plan.ep, measured=tables)
        out = cls(workload, compute, network, kv_fraction=kv_fraction,
                  max_num_tokens=max_num_tokens, custom_allreduce=custom_allreduce,
                  cuda_graph_sizes=tuple(sorted(set(cuda_graph_sizes))),
                  cuda_graph_padding=cuda_graph_padding,
                  deepep_low_latency=deepep_low_latency,
                  fused_allreduce_norm=fused_allreduce_norm,
                  host_step_overhead_us=host_step_overhead_us, max_num_seqs=max_num_seqs)
        if out.kv_capacity_tokens <= 0:
            state = (f", Mamba state for {max_num_seqs} sequences "
                     f"({out.state_bytes / 2**30:.1f} GiB)" if out.state_bytes else "")
            raise InfeasiblePlan(
                f"weights ({out.weight_bytes_per_gpu / 2**30:.1f} GiB per GPU) and activations "
                f"({out.activation_bytes / 2**30:.1f} GiB){state} leave no HBM for the KV "
                f"cache ({gpu.memory_bytes / 2**30:.1f} GiB per GPU)")
        return out

    def __post_init__(self) -> None:
        w = self.workload
        self.weight_bytes_per_gpu = max(w.weight_bytes_per_gpu())
        per_layer = w.kv_bytes_per_token_layer()
        self.kv_bytes_per_token = per_layer * max(w.stage_attention)
        self.activation_bytes = self._activation_bytes()
        self.state_bytes = w.state_bytes_per_seq_gpu() * self.max_num_seqs
        free = self.compute.gpu.memory_bytes - self.weight_bytes_per_gpu - self.activation_bytes
        if self.state_bytes:
            free -= self.state_bytes
        per_gpu = max(free, 0.0) * self.kv_fraction / self.kv_bytes_per_token
        self.kv_capacity_tokens = int(per_gpu) * w.plan.ep
        self._stage_layers = list(w.stage_attention)
        self._mla = w.model.mla is not None
        self._reread = 1.0
        if w.plan.decode_attention == "per_head" and not self._mla:
            self._reread = w.model.num_heads / max(w.model.kv_heads, w.plan.tp)
        self._pricers = {(c, a): self._attention_pricer(c, a)
                         for c in (False, True) for a in {False, self._mla}}
        # custom all-reduce kernels need the TP group inside one NVLink domain
        topo = self.network.topology
        self._custom_bw = 0.0
        if (self.custom_allreduce and isinstance(topo, TwoTierTopology) and w.plan.tp > 1
                and not self.network.placement("tp").crosses_domains):
            self._custom_bw = CUSTOM_ALLREDUCE_BW_FRACTION * topo.scale_up.bandwidth_GBps * GB
            # >= 0.5 us: the latency field is >= 0 (exactly the fit on the reference)
            delta = topo.scale_up.latency_us - CUSTOM_ALLREDUCE_REF_LATENCY_US
            self._custom_alpha_s = (CUSTOM_ALLREDUCE_LATENCY_US
                                    + CUSTOM_ALLREDUCE_HOPS * delta) * US
        if self.ll_all_to_all and w.plan.ep > 1:
            self._ll = deepep_parameters(topo, self.network.placement("ep"), w.plan.ep)

    def _variant(self, graph: bool) -> StepCostModel:
        """The model of decode-only steps: compute kernels at the graph-replay fixed cost when
        ``graph``, EP all-to-alls as DeepEP low-latency kernels when ``deepep_low_latency``
        (built once per kind)."""
        hit = self._variants.get(graph)
        if hit is None:
            compute = graph_compute(self.compute) if graph else self.compute
            # every other setting carried over; the variant picks no variant of its own
            hit = replace(self, compute=compute, cuda_graph_sizes=(), cuda_graph_padding=False,
                          deepep_low_latency=False, ll_all_to_all=self.deepep_low_latency)
            self._variants[graph] = hit
        return hit

    def _model_for(self, shape: StepShape) -> StepCostModel:
        """``self``, or the decode variant that prices a decode-only ``shape``."""
        if shape.decode <= 0 or shape.prefill_tokens > 0:
            return self
        graph = self.graph_captured(shape)
        if graph or self.deepep_low_latency:
            return self._variant(graph)
        return self

    def graph_captured(self, shape: StepShape) -> bool:
        """Whether a step of ``shape`` replays a captured CUDA graph (:func:`captured`)."""
        return captured(self.cuda_graph_sizes, self.cuda_graph_padding, shape,
                        self.workload.plan.ep)

    # --- contract API -------------------------------------------------------------------

    @property
    def plan(self) -> InferencePlan:
        return self.workload.plan

    @property
    def num_gpus(self) -> int:
        """GPUs of the engine."""
        return self.workload.plan.num_gpus

    def step_time_s(self, prefill: Sequence[tuple[int, int]], decode: Sequence[int]) -> float:
        """Seconds of one forward pass: ``prefill`` = (new tokens, cached tokens) per prompt
        chunk, ``decode`` = cached context length per decoding request (one new token each).
        Includes TP/EP all-reduces and all-to-alls and PP transfers. An empty batch costs 0."""
        return self.shape_time_s(StepShape.of(prefill, decode))

    def step_time_agg_s(self, prefill: Sequence[tuple[int, int]], decode: int,
                        context_sum: float) -> float:
        """:meth:`step_time_s` from aggregates: ``decode`` decoding requests whose cached
        contexts sum to ``context_sum`` (decode attention depends only on the sum)."""
        return self.shape_time_s(StepShape.mixed(prefill, decode, context_sum))

    @property
    def custom_allreduce_used(self) -> bool:
        """Whether TP all-reduces are priced with the custom-kernel model too (enabled, TP
        > 1, and the TP group inside one NVLink domain)."""
        return self._custom_bw > 0

    def verify_time_s(self, prefill: Sequence[tuple[int, int]], decode: int,
                      context_sum: float, draft_tokens: int) -> float:
        """Seconds of a speculative-decoding verify step: ``prefill`` chunks plus ``decode``
        sequences (cached contexts summing to ``context_sum``) each verifying
        ``draft_tokens`` drafts, i.e. a chunk of ``q = draft_tokens + 1`` new tokens over its
        context (causal among themselves), with one row of logits per new token."""
        q = float(draft_tokens + 1)
        n = float(decode)
        shape = StepShape.of(prefill, ()) + StepShape(
            tokens=n * q, sequences=n * q, prefill_tokens=n * q, prefill_sq=n * q * q,
            prefill_ctx_pairs=q * context_sum, prefill_ctx_keys=context_sum)
        return self.shape_time_s(shape)

    def kv_transfer_bytes(self, tokens: int) -> float:
        """KV-cache bytes of a request of ``tokens`` tokens: all layers, all KV heads, counted
        once (TP copies of replicated heads or of an MLA latent are not counted), plus the
        recurrent state of its Mamba layers."""
        kv = tokens * self.workload.kv_bytes_per_token_model()
        if tokens > 0 and self.workload.model.mamba is not None:
            kv += state_bytes_per_sequence(self.workload.model)
        return kv

    # --- shapes -------------------------------------------------------------------------

    def shape_time_s(self, shape: StepShape) -> float:
        """Seconds of one step of aggregate ``shape`` (sums may be fractional: averages)."""
        return sum(self.stage_times_s(shape))

    def stage_times_s(self, shape: StepShape) -> list[float]:
        """Seconds each pipeline stage spends on the step (p2p to the next stage included)."""
        if shape.tokens <= 0:
            return [0.0] * len(self.workload.stages)
        model = self._model_for(shape)
        if model is not self:
            return model.stage_times_s(shape)
        w = self.workload
        r = 1.0 / w.plan.ep
        times = list(self._token_part(shape.tokens * r))
        attn = self._attention_layer_s(shape, r)
        for s, n_layers in enumerate(self._stage_layers):
            times[s] += n_layers * attn
        times[-1] += self._head(shape.sequences * r)
        if any(w.stage_mamba):  # the SSD scan / state updates of the step's shape
            scan = sum(self._price(o) for o in w.scan_ops(shape))
            for s, n_mamba in enumerate(w.stage_mamba):
                times[s] += n_mamba * scan
        if self.host_step_overhead_us:
            times[0] += self.host_step_overhead_us * US
        return times

    def _attention_layer_s(self, shape: StepShape, r: float) -> float:
        """Seconds of one layer's attention kernels on a replica (closed form, see
        :meth:`_attention_pricer`; equal to pricing the bound operators)."""
        t = 0.0
        if shape.decode > 0:
            a, bq, bk, o = self._pricers[(False, self._mla)]
            pairs = shape.decode_keys * r
            t += max(a * pairs, bq * shape.decode * r + bk * pairs * self._reread) + o
        if shape.prefill_tokens > 0:
            a, bq, bk, o = self._pricers[(True, False)]
            q = shape.prefill_tokens * r
            t += max(a * shape.prefill_sq * r, (bq + bk) * q) + o
        if shape.prefill_ctx_pairs > 0:
            a, bq, bk, o = self._pricers[(False, self._mla)]
            t += max(a * shape.prefill_ctx_pairs * r,
                     bq * shape.prefill_tokens * r + bk * shape.prefill_ctx_keys * r) + o
        return t

    def _attention_pricer(self, causal: bool, absorbed: bool) -> tuple[float, float, float,
                                                                      float]:
        """``(s per query·key pair, s per query, s per key, s fixed)`` of an attention kernel:
        the compute model's roofline ``max(FLOPs/rate, bytes/bandwidth) + overhead`` is read
        off with probe operators and the template's linear coefficients, then checked."""
        cf, cq, ck = self.workload.attention_coefficients(absorbed)
        head_dim = self.workload.attention_head_dim(absorbed)

        def probe(flops: float, nbytes: float) -> float:
            return self.compute.time(Op(name="probe", kind="attention", category="forward",
                                        layer=0, flops=flops, bytes=nbytes, causal=causal,
                                        head_dim=head_dim))

        o = probe(0.0, 0.0)
        per_flop = (probe(1e12, 0.0) - o) / 1e12
        per_byte = (probe(0.0, 1e12) - o) / 1e12
        for f, b in ((3e11, 7e11), (9e12, 2e9)):
            want = max(f * per_flop, b * per_byte) + o
            if not math.isclose(probe(f, b), want, rel_tol=1e-9):
                raise AssertionError("attention pricing is not a roofline; cannot fold it")
        return cf * per_flop, cq * per_byte, ck * per_byte, o

    def breakdown_s(self, shape: StepShape) -> dict[str, float]:
        """Seconds of the step by operator kind (gemm, attention, memory, comm), summed over
        stages, priced operator by operator without caching (for reports and checks)."""
        model = self._model_for(shape)
        if model is not self:
            return model.breakdown_s(shape)
        out = {"gemm": 0.0, "attention": 0.0, "memory": 0.0, "comm": 0.0}
        for stage in self.workload.step_ops(shape):
            for op in stage:
                out[op.kind] += self._price(op)
        return out

    def exact_time_s(self, shape: StepShape) -> float:
        """:meth:`shape_time_s` without the token-count grid (every operator bound and priced
        for the exact counts); slower, for checks."""
        model = self._model_for(shape)
        if model is not self:
            return model.exact_time_s(shape)
        return sum(self._price(o) for stage in self.workload.step_ops(shape) for o in stage)

    # --- pricing ------------------------------------------------------------------------

    def op_time_s(self, op: Op) -> float:
        """Seconds of one bound operator as every price of this model takes it: a kernel by
        the compute model, a collective by the network model (a TP all-reduce inside an
        NVLink domain by the faster of that and the custom-kernel model)."""
        return self._price(op)

    def _price(self, op: Op) -> float:
        if op.kind == "comm" and op.comm == "all_to_all" and op.group == "ep" \
                and self._ll[1] > 0:
            return deepep_all_to_all_s(op.size, self._ll)
        if op.kind == "comm":
            t = self.network.collective(op.comm or "all_reduce", op.group or "tp",
                                        op.size).time_s
            if op.comm == "all_reduce" and op.group == "tp" and self._custom_bw > 0:
                t = min(t, self._custom_allreduce_s(op))
            return t
        return self.compute.time(op)

    def _custom_allreduce_s(self, op: Op) -> float:
        """Seconds of a TP all-reduce on the custom NVLink kernel (module constants)."""
        n = self.workload.plan.tp
        return self._custom_alpha_s + 2.0 * (n - 1) / n * op.size / self._custom_bw

    def _on_custom_kernel(self, op: Op) -> bool:
        """Whether a TP all-reduce is priced on the custom kernel (faster than NCCL)."""
        return (op.group == "tp" and self._custom_bw > 0
                and self._custom_allreduce_s(op) <= self._price(op))

    def _layer_s(self, kind: str, tokens: float) -> float:
        """Seconds of one layer's token-dependent operators (with the all-reduce + norm
        fusion when ``fused_allreduce_norm``)."""
        ops = self.workload.layer_ops(kind, tokens)
        if not self.fused_allreduce_norm:
            return sum(self._price(o) for o in ops)
        overhead = op_overhead_us(self.compute.gpu) * US
        return layer_seconds(ops, self._price, self._on_custom_kernel, overhead)

    def _token_exact(self, tokens: float) -> tuple[float, ...]:
        hit = self._tok_cache.get(tokens)
        if hit is not None:
            return hit
        w = self.workload
        per_kind = {kind: self._layer_s(kind, tokens) for kind in w.kinds}
        last = len(w.stages) - 1
        times = []
        for s, counts in enumerate(w.stage_kinds):
            t = sum(n * per_kind[kind] for kind, n in counts.items())
            if s == 0:
                t += sum(self._price(o) for o in w.embedding_ops(tokens))
            if s != last:
                t += self._price(w.p2p_op(tokens))
            times.append(t)
        out = tuple(times)
        self._tok_cache[tokens] = out
        return out

    def _token_part(self, tokens: float) -> tuple[float, ...]:
        """Token-dependent seconds per stage: exact up to ``EXACT_TOKENS``, else linear
        interpolation between the two neighbouring grid points."""
        if tokens <= EXACT_TOKENS:
            return self._token_exact(tokens)
        x = GRID_PER_OCTAVE * math.log2(tokens / EXACT_TOKENS)
        i = int(x)
        lo_t, hi_t = _grid(i), _grid(i + 1)
        lo, hi = self._token_exact(lo_t), self._token_exact(hi_t)
        f = (tokens - lo_t) / (hi_t - lo_t)
        return tuple(a + f * (b - a) for a, b in zip(lo, hi, strict=True))

    def _head(self, sequences: float) -> float:
        hit = self._head_cache.get(sequences)
        if hit is None:
            hit = sum(self._price(o) for o in self.workload.head_ops(sequences))
            self._head_cache[sequences] = hit
        return hit

    def _activation_bytes(self) -> float:
        """Activation workspace: the largest activation traffic (inputs + outputs, weights
        excluded) of one kernel at ``max_num_tokens`` tokens per replica, a proxy for the
        live tensors at the peak of a forward pass (TensorRT-LLM sizes its buffers for
        ``max_num_tokens`` before allocating the KV cache)."""
        w = self.workload
        tokens = float(self.max_num_tokens)
        ew = w.plan.weight_bytes
        best = 0.0
        for kind in w.kinds:
            for op in w.layer_ops(kind, tokens):
                if op.kind == "comm":
                    continue
                act = op.bytes
                if op.kind == "gemm" and op.mnk is not None:
                    _, n, k = op.mnk
                    act -= n * k * op.count * ew
                best = max(best, act)
        return best

