"""One rank of the FSDP2 check (tests/test_fsdp_torch.py): shard a tiny model with a plan's units,
train one step, and write what FSDP built and the loss to a JSON file.

Usage: python tests/fsdp_worker.py RANK WORLD RENDEZVOUS_FILE PLAN_JSON OUT_JSON [MODEL]

MODEL: ``tiny`` (default) or ``rooted`` (the root's own layers around blocks, frozen parameters).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from schedopt.emit.fsdp import emit_fsdp
from schedopt.emit.fsdp_torch import apply_sharded_plan, fsdp_groups, train_step
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

SEED = 1234
BATCH = 8  # per rank
MICRO = 2  # micro-batches per step when the plan accumulates


class Block(nn.Module):
    """A residual MLP block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(x)))


class Tiny(nn.Module):
    """Input projection, four blocks, head: 10 leaf layers owning parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.blocks = nn.ModuleList([Block(8) for _ in range(4)])
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def tiny_trace() -> Trace:
    """The model's trace by hand: one layer per leaf module, its parameters as tensors."""
    return _trace_of(Tiny(), "tiny")


class Rooted(nn.Module):
    """The root's own layers around three blocks: embedding, blocks, final norm, head. Frozen
    (``requires_grad=False``): block 0's first bias, all of block 1, the norm."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.blocks = nn.ModuleList([Block(8) for _ in range(3)])
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 3)
        for p in (self.blocks[0].fc1.bias, *self.blocks[1].parameters(), *self.norm.parameters()):
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h)).mean(dim=1)


VOCAB = 10


def _trace_of(model: nn.Module, name: str) -> Trace:
    """A model's trace by hand: one layer per leaf module owning parameters, its trainable
    parameters as tensors and its frozen ones as ``frozen``."""
    layers = []
    for mod_name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if own and next(module.children(), None) is None:
            lists: dict[str, list] = {"tensors": [], "frozen": []}
            for p, t in own:
                lists["tensors" if t.requires_grad else "frozen"].append(
                    {"name": f"{mod_name}.{p}", "bytes": t.numel() * 4,
                     **({"rows": t.shape[0]} if t.dim() >= 2 else {})})
            layers.append({"name": mod_name, "forward_s": 1e-4, "backward_s": 2e-4, **lists})
    return Trace.model_validate({"name": name, "batch_size": BATCH, "layers": layers})


def rooted_trace() -> Trace:
    """:class:`Rooted`'s trace (frozen parameters listed per layer)."""
    return _trace_of(Rooted(), "rooted")


def data(world: int, steps: int, model: str = "tiny") -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of every step (the same on every rank)."""
    g = torch.Generator().manual_seed(SEED + 1)
    if model == "rooted":  # token ids, four per sample
        x = torch.randint(0, VOCAB, (steps, world * BATCH, 4), generator=g)
    else:
        x = torch.randn(steps, world * BATCH, 6, generator=g)
    y = torch.randint(0, 3, (steps, world * BATCH), generator=g)
    return x, y


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


MODELS = {"tiny": (Tiny, tiny_trace), "rooted": (Rooted, rooted_trace)}


def reference_losses(world: int, steps: int, accumulate: int, name: str = "tiny"
                     ) -> list[float]:
    """Unsharded training on the global batch (the mean over ranks of their losses)."""
    torch.manual_seed(SEED)
    model = MODELS[name][0]()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    xs, ys = data(world, steps, name)
    out = []
    for s in range(steps):
        total = 0.0
        for m in range(accumulate):
            xm = torch.cat([xs[s, r * BATCH:(r + 1) * BATCH].chunk(accumulate)[m]
                            for r in range(world)])
            ym = torch.cat([ys[s, r * BATCH:(r + 1) * BATCH].chunk(accumulate)[m]
                            for r in range(world)])
            loss = loss_fn(model, (xm, ym)) / accumulate
            loss.backward()
            total += float(loss)
        opt.step()
        opt.zero_grad()
        out.append(total)
    return out


def main(argv: list[str]) -> int:
    rank, world = int(argv[1]), int(argv[2])
    plan = Plan.model_validate_json(Path(argv[4]).read_text())
    name = argv[6] if len(argv) > 6 else "tiny"
    factory, trace_of = MODELS[name]
    trace = trace_of()
    dist.init_process_group("gloo", init_method=f"file://{argv[3]}", rank=rank,
                            world_size=world)
    # every all-gather (output elements) and reduce-scatter (input elements) FSDP2 issues, in
    # issue order, with the step and the pass (fwd, or bwd once the loss's gradient is asked)
    comms: list[list] = []
    step: list = [-1, "fwd"]
    for attr, kind, arg in (("all_gather_single", "ag", 0), ("reduce_scatter_single", "rs", 1)):
        def record(*args, _fn=getattr(dist, attr), _kind=kind, _arg=arg, **kwargs):
            big = kwargs.get("input" if _arg else "output", args[_arg] if len(args) > _arg
                             else None)
            comms.append([step[0], _kind, int(big.numel()), str(big.dtype), step[1]])
            return _fn(*args, **kwargs)
        setattr(dist, attr, record)

    def marked_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        step[1] = "fwd"
        loss = loss_fn(model, batch)
        loss.register_hook(lambda g: step.__setitem__(1, "bwd"))
        return loss

    torch.manual_seed(SEED)
    model = apply_sharded_plan(factory(), trace, plan)
    groups = fsdp_groups(model)
    reduce_dtypes = sorted({str(g.mp_policy.reduce_dtype) for m in model.modules()
                            if hasattr(m, "_get_fsdp_state")
                            for g in m._get_fsdp_state()._fsdp_param_groups})
    # the emitted snippet, applied to a second copy, builds the same groups
    snippet: dict = {}
    exec(compile(emit_fsdp(trace, None, plan).files["fsdp_snippet.py"], "fsdp_snippet.py", "exec"),
         snippet)
    torch.manual_seed(SEED)
    snippet_groups = fsdp_groups(snippet["apply_fsdp"](factory()))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    steps = 2
    xs, ys = data(world, steps, name)
    losses = []
    for s in range(steps):
        step[0] = s
        x = xs[s, rank * BATCH:(rank + 1) * BATCH]
        y = ys[s, rank * BATCH:(rank + 1) * BATCH]
        micro = list(zip(x.chunk(plan.accumulate), y.chunk(plan.accumulate), strict=True))
        local = torch.tensor(train_step(model, micro, marked_loss, opt, plan))
        dist.all_reduce(local)
        losses.append(float(local) / world)
    dist.barrier()  # the process group is left to os._exit (__main__): gloo may abort in teardown
    if rank == 0:
        Path(argv[5]).write_text(json.dumps({
            "groups": groups, "snippet_groups": snippet_groups, "losses": losses,
            "reduce_dtypes": reduce_dtypes, "comms": comms,
            "reference": reference_losses(world, steps, plan.accumulate, name)}))
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # leave without the interpreter's teardown: torch's background threads (gloo, autograd)
    # can abort there ("terminate called without an active exception") after the work is done
    os._exit(code)
