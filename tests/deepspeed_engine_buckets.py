"""Record the gradient buckets DeepSpeed's own engine forms (run by tests/test_framework_code.py).

Usage: ``python deepspeed_engine_buckets.py CASES.json OUT.json`` in a fresh process per rank
with ``DS_ACCELERATOR=cpu`` and ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set
(gloo; rank 0 writes the output). ``CASES.json`` holds
``{"traces": {name: [[tensor, numel, dtype], ...]}, "cases": [{"trace": name,
"config": {...}}, ...]}`` with tensors in forward (parameter) order; ``OUT.json`` gets, for every
case, the buckets the engine reduced (lists of tensor names in reduction order), the elements of
every all-reduce call of each ZeRO bucket, the elements and communication dtype of every
all-reduce the engine itself issues (stage 0's fallback, ``BF16_Optimizer``'s flat buffer), the
optimizer class the engine chose, and the order in which autograd made the gradients ready.

The model has one 1-D parameter per trace tensor (its numel and dtype); the forward adds, layer by
layer in forward order and tensor by tensor in list order, the sum of each parameter to a running
scalar, so autograd readies the gradients in the trace's default gradient-ready order (reverse
layers, reverse tensor list inside a layer). Nothing is trained: one forward, one backward and
the engine's gradient reduction. With ``torch_autocast`` the parameters are float32 and the
16-bit tensors of the trace carry that dtype as their communication dtype.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Chain(torch.nn.Module):
    """One parameter per tensor; the forward walks them in forward order."""

    def __init__(self, tensors: list[list], autocast: bool = False) -> None:
        super().__init__()
        self.names = [t[0] for t in tensors]
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(int(t[1]), dtype=torch.float32 if autocast
                                           else DTYPES[t[2]])) for t in tensors
        )
        if autocast:
            # under torch_autocast the weights stay float32 and a parameter's communication
            # dtype is the autocast dtype for Linear/Conv weights (DeepSpeed sets the
            # ``comm_dtype`` attribute on them): a 16-bit trace tensor stands for one of those
            for t, p in zip(tensors, self.params, strict=True):
                if t[2] != "float32":
                    p.comm_dtype = DTYPES[t[2]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for p in self.params:
            out = out + p.float().sum()
        return out


def run_case(tensors: list[list], config: dict) -> dict:
    """Build the engine on ``Chain(tensors)``, run one step, return the reductions."""
    import deepspeed
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    model = Chain(tensors, autocast=config.get("torch_autocast", {}).get("enabled", False))
    name_of = {id(p): n for n, p in zip(model.names, model.params, strict=True)}
    ready: list[str] = []
    for n, p in zip(model.names, model.params, strict=True):
        p.register_post_accumulate_grad_hook(lambda _p, n=n: ready.append(n))
    buckets: list[list[str]] = []
    calls: list[list[int]] = []  # elements of every collective, per bucket
    wire: list[list] = []  # the engine's all-reduces: [elements, communication dtype]
    saved = (DeepSpeedZeroOptimizer.average_tensor, DeepSpeedEngine.allreduce_and_copy,
             DeepSpeedZeroOptimizer.allreduce_and_copy_with_multiple_ranks)

    def zero_average(self, tensor, comm_dtype):  # one call per reduced IPG bucket
        params = self.ipg_buckets[comm_dtype].params
        if params:
            buckets.append([name_of[id(self.bit16_groups[i][j])] for i, j, _ in params])
            calls.append([])
        return saved[0](self, tensor, comm_dtype)

    def zero_call(self, small_bucket, *args, **kwargs):  # one all-reduce of slices
        calls[-1].append(sum(int(t.numel()) for t in small_bucket))
        return saved[2](self, small_bucket, *args, **kwargs)

    def fallback_allreduce(self, small_bucket, *args, **kwargs):  # the engine's all-reduce
        by_ptr = {p.grad.data_ptr(): [name_of[id(p)]] for p in model.params
                  if p.grad is not None}
        # BF16_Optimizer hands over its flat fp32 gradient buffer (one per parameter group)
        flats = getattr(self.optimizer, "fp32_groups_gradients_flat", [])
        groups = getattr(self.optimizer, "bf16_groups", [])
        by_ptr.update({f.data_ptr(): [name_of[id(p)] for p in g]
                       for f, g in zip(flats, groups, strict=True)})
        buckets.append([n for t in small_bucket for n in by_ptr[t.data_ptr()]])
        wire.append([sum(int(t.numel()) for t in small_bucket),
                     str(self.communication_data_type).removeprefix("torch.")])
        return saved[1](self, small_bucket, *args, **kwargs)

    DeepSpeedZeroOptimizer.average_tensor = zero_average
    DeepSpeedEngine.allreduce_and_copy = fallback_allreduce
    DeepSpeedZeroOptimizer.allreduce_and_copy_with_multiple_ranks = zero_call
    try:
        cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
               "zero_allow_untested_optimizer": True,
               "optimizer": {"type": "SGD", "params": {"lr": 0.0}},
               **config}
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                          config=cfg)
        optimizer = type(engine.optimizer).__name__
        loss = engine(torch.zeros(1))
        engine.backward(loss)
        engine.step()
        engine.destroy()  # free the engine's buffers before the next case
        del engine, loss
        gc.collect()
    finally:
        (DeepSpeedZeroOptimizer.average_tensor, DeepSpeedEngine.allreduce_and_copy,
         DeepSpeedZeroOptimizer.allreduce_and_copy_with_multiple_ranks) = saved
    return {"buckets": buckets, "calls": calls, "ready": ready, "wire": wire,
            "optimizer": optimizer}


def main() -> None:
    """Run every case of ``argv[1]`` and write the results to ``argv[2]``."""
    import deepspeed
    import deepspeed.comm.torch  # the module itself is read back from sys.modules
    from deepspeed.accelerator import get_accelerator

    # the shared-memory all-reduce kernel only speeds up several CPU ranks; building it is a
    # one-time C++ compile (a minute or more) that one rank does not need
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]

    # the CUDA accelerator's list (float32, float16, bfloat16): the CPU accelerator drops float16
    # where oneDNN lacks it, and the stage-0 fallback reduces dtypes in this list's order
    accelerator = get_accelerator()
    accelerator.supported_dtypes = lambda: [torch.float32, torch.float16, torch.bfloat16]
    with open(sys.argv[1]) as fh:
        spec = json.load(fh)
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    out = [run_case(spec["traces"][c["trace"]], c["config"]) for c in spec["cases"]]
    if int(os.environ.get("RANK", "0")) == 0:
        with open(sys.argv[2], "w") as fh:
            json.dump({"version": deepspeed.__version__, "results": out}, fh)


if __name__ == "__main__":
    main()
