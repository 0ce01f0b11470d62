"""Sharded plan -> PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``) groups and settings.

A unit of the plan becomes one ``fully_shard`` call, which makes one FSDP parameter group (one
all-gather and one reduce-scatter per use). The trace's layers are module names (leaf modules
owning parameters, as :func:`schedopt.measure.profile.profile_model` and instances/generate.py
name them), so a unit is a set of modules: the emitter collapses it to the fewest modules whose
parameter-owning descendants are all in the unit (``transformer.h.3`` for a unit that is one
block), and passes a list when several remain (``fully_shard([m1, m2])``, which FSDP2 accepts
since torch 2.6 and groups as one). ``fully_shard`` is finally applied to the root module, which
then manages no parameter of its own but drives the lazy initialisation.

What maps exactly (torch 2.13, read from ``torch/distributed/fsdp/_fully_shard``):

- mode ``full`` -> ``reshard_after_forward=True``; ``grad-op`` -> ``False`` (set explicitly for
  every unit's group).
- the plan's root group (``Sharding.root``) -> the parameters left to ``fully_shard`` on the
  root module, with ``reshard_after_forward=False`` (FSDP2's root default: ``_fsdp_state.py``,
  ``FSDPState._lazy_init``): gathered at the root's pre-forward, kept through the backward,
  reduce-scattered in the root's post-backward final callback, as the plan says. Without a
  root group the root call manages no parameter and gets the units' setting.
- forward prefetch ``p >= 1``: unit ``u`` calls ``set_modules_to_forward_prefetch`` with units
  ``u+1 .. u+p`` (prefetches are issued after ``u``'s all-gather, so at the start of its
  forward ``u+p`` is in flight). ``p = 1`` is FSDP2's default overlap (the singleton list gives
  "the same all-gather overlap behavior as the default"), so nothing is set for it.
- backward prefetch ``q >= 1``: unit ``u`` prefetches units ``u-1 .. u-q``; ``q = 1`` is FSDP2's
  default (the previous group in reverse post-forward order, used when no list is set).
- ``comm_dtype`` -> ``MixedPrecisionPolicy(reduce_dtype=...)`` (``param_dtype`` left alone).
- ``accumulate = k`` -> ``set_requires_gradient_sync(False)`` for the first ``k-1`` micro-batches
  (and, in ``grad-op``, ``set_reshard_after_backward(False)`` so parameters stay gathered across
  them, as the model assumes).

What does not: depth 0 (FSDP2 always overlaps one all-gather: the forward's all-gather is issued
when the CPU reaches the module, ahead of the GPU, and an empty backward list means the
default), ``streams = 1`` (FSDP2 has separate all-gather and reduce-scatter streams), and a tied
parameter used in two units (FSDP2 shards a parameter in one group: the later module joins the
earlier unit's call). Each becomes a note and ``exact = False``.

FSDP2 always pads every parameter's first dimension to a multiple of the world size, so the
emitted run moves the padded bytes whatever the plan's ``padding`` (``emitted_time_s``
simulates them); a unit whose tensors have several dtypes is refused, as FSDP2 refuses such a
group (``_init_mp_dtypes``).
"""

from __future__ import annotations

import json
import pprint

from schedopt.emit.common import Emitted, placeholder_cluster, spec_of
from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Sharding
from schedopt.model.trace import Trace

__all__ = ["emit_fsdp", "fsdp_config", "unit_modules"]

#: FSDP2's defaults: the prefetch depths it gives without explicit lists.
DEFAULT_PREFETCH = 1

_TORCH_DTYPE = {"float64": "float64", "float32": "float32", "float16": "float16",
                "bfloat16": "bfloat16"}


def _sharding(plan: Plan, target: str) -> Sharding:
    if plan.sharding is None:
        raise SchedoptError(f"the {target} target needs a sharded plan (plan.sharding is None;"
                            " use an fsdp/zero3 policy or optimize --sharding)", "plan.sharding",
                            None)
    return plan.sharding


def _ancestors(name: str) -> list[str]:
    """Dotted prefixes of ``name``, outermost first, ``name`` last (``""`` is the root)."""
    parts = name.split(".")
    return ["", *(".".join(parts[: i + 1]) for i in range(len(parts)))]


def _under(prefix: str, name: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def unit_modules(units: list[list[str]], layer_names: list[str],
                 root: list[str] | None = None) -> list[list[str]]:
    """The fewest module names per unit whose parameter-owning layers are exactly the unit's.

    For each layer, the outermost ancestor module all of whose layers (trace layers under it)
    lie in the same unit stands for it; ``""`` is the root module (a single unit covering every
    layer). Names keep forward order.

    Parameters
    ----------
    units
        Layer names per unit (checked against the trace beforehand).
    layer_names
        Every layer of the trace, in forward order.
    root
        The plan's root group (layers in no unit, left to ``fully_shard`` on the root), if any.

    Returns
    -------
    list of list of str
        Per unit, module names for one ``fully_shard`` call.
    """
    unit_of = {name: k for k, unit in enumerate(units) for name in unit}
    unit_of.update(dict.fromkeys(root or [], -1))
    out: list[list[str]] = [[] for _ in units]
    for k, unit in enumerate(units):
        for name in unit:
            chosen = name
            for prefix in _ancestors(name):
                if all(unit_of[n] == k for n in layer_names if _under(prefix, n)):
                    chosen = prefix
                    break
            if chosen not in out[k]:
                out[k].append(chosen)
    return out


def _tied_moves(plan: Plan, trace: Trace, groups: list[list[str]]) -> list[str]:
    """Move modules of layers whose tensors all belong to an earlier unit (tied weights) into
    that unit's call; return a note per move."""
    sharding = _sharding(plan, "fsdp")
    unit_of_layer = {name: k for k, unit in enumerate(sharding.groups) for name in unit}
    owner = trace.tensor_layer_by_name
    root = len(sharding.units)  # the root group's index, when the plan has one
    notes = []
    for layer in trace.layers:
        k = unit_of_layer[layer.name]
        homes = {unit_of_layer[trace.layers[owner[t.name]].name] for t in layer.tensors}
        home = min(homes, default=k)
        if k == root or home == root:
            if home != k:
                notes.append(f"layer {layer.name} shares a tensor with another group; FSDP2's "
                             "root call manages only what no unit's call took")
            continue
        if home != k:
            if layer.name in groups[k]:
                groups[k].remove(layer.name)
            groups[home].append(layer.name)
            notes.append(f"layer {layer.name} uses a tensor tied to unit {home}; FSDP2 shards a "
                         f"parameter in one group, so module {layer.name} joins unit {home}'s "
                         "fully_shard call (its use re-gathers that unit)")
    return notes


def fsdp_config(trace: Trace, plan: Plan, cluster: Cluster | None = None
                ) -> tuple[dict, list[str]]:
    """The FSDP2 settings of a sharded plan and the notes on what they cannot express.

    Parameters
    ----------
    trace, plan
        The trace and its sharded plan, checked here (once per emit).
    cluster
        When given, the plan's cluster hash is checked against it too.

    Returns
    -------
    dict, list of str
        ``groups`` (module names per unit, forward order; ``""`` the root),
        ``reshard_after_forward``, ``root_reshard_after_forward`` (of the root call: False for
        a plan with a root group), ``forward_prefetch``, ``backward_prefetch`` (depths, 1 is
        FSDP2's default), ``reduce_dtype`` (None: the parameters'), ``accumulate``; and notes.

    Raises
    ------
    SchedoptError
        The plan is not sharded or does not fit the trace, or a unit holds tensors of several
        dtypes (FSDP2 refuses such a group at its first forward).
    """
    from schedopt.policies.fsdp import check_group_dtypes

    sharding = _sharding(plan, "fsdp")
    plan.check_against(trace, cluster)
    check_group_dtypes(trace, [list(u) for u in sharding.units], "plan.sharding.units")
    if sharding.root is not None:
        check_group_dtypes(trace, [sharding.root], "plan.sharding.root")
    groups = unit_modules([list(u) for u in sharding.units], [la.name for la in trace.layers],
                          sharding.root)
    notes = _tied_moves(plan, trace, groups)
    groups = [g for g in groups if g]
    for field in ("forward_prefetch", "backward_prefetch"):
        if getattr(sharding, field) == 0:
            notes.append(f"{field} is 0; FSDP2 always overlaps the next all-gather (its default,"
                         " depth 1, is used)")
    if sharding.streams == 1:
        notes.append("streams is 1; FSDP2 issues all-gathers and reduce-scatters on separate "
                     "streams")
    if plan.comm_dtype is not None and plan.comm_dtype not in _TORCH_DTYPE:
        raise SchedoptError("FSDP2 cannot reduce in this dtype", "plan.comm_dtype",
                            plan.comm_dtype)
    if plan.next_forward != "wait-for-all":
        notes.append(f"next_forward is {plan.next_forward}; FSDP2's optimizer step waits for "
                     "every reduce-scatter")
    config = {
        "groups": groups,
        "reshard_after_forward": sharding.mode == "full",
        "root_reshard_after_forward": sharding.mode == "full" and sharding.root is None,
        "forward_prefetch": max(sharding.forward_prefetch, DEFAULT_PREFETCH),
        "backward_prefetch": max(sharding.backward_prefetch, DEFAULT_PREFETCH),
        "reduce_dtype": plan.comm_dtype,
        "accumulate": plan.accumulate,
    }
    return config, notes


def emit_fsdp(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Express a sharded ``plan`` as FSDP2 ``fully_shard`` groups and settings.

    Parameters
    ----------
    plan, trace
        The sharded plan and the trace it was made for (layer names = module names).
    cluster
        The cluster (optional; checked against the plan's hash).

    Returns
    -------
    Emitted
        ``fsdp.json`` (the settings) and ``fsdp_snippet.py`` (``apply_fsdp(model)`` and
        ``train_step``); with a cluster, the simulated times of the plan and of the plan as
        FSDP2 runs it (depth at least 1, two streams).

    Raises
    ------
    SchedoptError
        The plan is not sharded (one line), or does not fit the trace or cluster.
    """
    config, notes = fsdp_config(trace, plan, cluster)  # checks the plan
    spec = _baseline_spec(plan, trace, cluster)
    files = {"fsdp.json": json.dumps(config, indent=1) + "\n",
             "fsdp_snippet.py": _snippet(plan, trace, config, not notes, spec)}
    out = Emitted(target="fsdp", files=files, exact=not notes, notes=notes, config=config,
                  spec=spec)
    if cluster is not None:
        from schedopt.simulate.simulator import simulate

        out.plan_time_s = simulate(trace, cluster, plan).iteration_time_s
        out.emitted_time_s = simulate(trace, cluster, _as_run(plan, config)).iteration_time_s
    return out


def _baseline_spec(plan: Plan, trace: Trace, cluster: Cluster | None) -> str | None:
    """The ``fsdp`` baseline spec that rebuilds the plan's units and settings, if one does."""
    from schedopt.policies import make_plan

    if plan.policy != "fsdp":
        return None
    spec = spec_of("fsdp", plan.knobs)
    try:
        again = make_plan(trace, cluster or placeholder_cluster(), spec)
    except SchedoptError:
        return None
    same = (again.sharding == plan.sharding and again.comm_dtype == plan.comm_dtype
            and again.accumulate == plan.accumulate)
    return spec if same else None


def _as_run(plan: Plan, config: dict) -> Plan:
    """The plan as FSDP2 runs it: its prefetch depths, two streams and first dimensions padded
    to a multiple of the world size (tied moves aside)."""
    sharding = _sharding(plan, "fsdp").model_copy(update={
        "forward_prefetch": config["forward_prefetch"],
        "backward_prefetch": config["backward_prefetch"], "streams": 2, "padding": "dim0"})
    return plan.model_copy(update={"sharding": sharding})


_SNIPPET_BODY = '''

def _module(model, name):
    return model if name == "" else model.get_submodule(name)


def apply_fsdp(model, mesh=None):
    """Apply the plan's units to ``model`` with FSDP2 (in place) and return it.

    Call it after ``torch.distributed.init_process_group``, before building the optimizer.
    """
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reduce = FSDP["reduce_dtype"]
    mp = MixedPrecisionPolicy(reduce_dtype=getattr(torch, reduce) if reduce else None)
    kw = {"mesh": mesh, "reshard_after_forward": FSDP["reshard_after_forward"],
          "mp_policy": mp}
    heads = []
    # bottom-up: deeper modules first, so a group never swallows a later group's parameters
    order = sorted(range(len(FSDP["groups"])),
                   key=lambda k: -min(n.count(".") + (n != "") for n in FSDP["groups"][k]))
    for k in order:
        modules = [_module(model, n) for n in FSDP["groups"][k]]
        fully_shard(modules if len(modules) > 1 else modules[0], **kw)
    for names in FSDP["groups"]:
        heads.append(_module(model, names[0]))
    if "" not in {n for g in FSDP["groups"] for n in g}:  # the root group, if any
        fully_shard(model, **{**kw, "reshard_after_forward": FSDP["root_reshard_after_forward"]})
    p, q = FSDP["forward_prefetch"], FSDP["backward_prefetch"]
    for u, head in enumerate(heads):
        if p > 1 and u + 1 < len(heads):
            head.set_modules_to_forward_prefetch(heads[u + 1 : u + 1 + p])
        if q > 1 and u > 0:
            head.set_modules_to_backward_prefetch(heads[max(0, u - q) : u][::-1])
    return model


def train_step(model, micro_batches, loss_fn, optimizer):
    """One optimizer step over ``micro_batches`` (the plan's accumulate), reducing on the last.

    ``loss_fn(model, batch)`` returns the micro-batch's loss; returns the mean loss.
    """
    total = 0.0
    last = len(micro_batches) - 1
    for i, batch in enumerate(micro_batches):
        model.set_requires_gradient_sync(i == last)
        if not FSDP["reshard_after_forward"]:
            model.set_reshard_after_backward(i == last)
        loss = loss_fn(model, batch) / len(micro_batches)
        loss.backward()
        total += float(loss)
    optimizer.step()
    optimizer.zero_grad()
    return total
'''


def _snippet(plan: Plan, trace: Trace, config: dict, exact: bool, spec: str | None) -> str:
    head = "\n".join([
        f'"""FSDP2 settings for the {plan.policy} sharded plan of {trace.name} '
        f"(trace {trace.fingerprint()}).",
        "",
        "groups: module names per unit (one fully_shard call each; '' is the root module).",
        f"{'Exact' if exact else 'Approximate'}: see the notes of `schedopt emit`.",
        *([f"Policy spec: {spec}"] if spec else []),
        '"""',
        "",
        f"FSDP = {pprint.pformat(config, width=96, sort_dicts=False)}",
    ])
    return head + "\n" + _SNIPPET_BODY
