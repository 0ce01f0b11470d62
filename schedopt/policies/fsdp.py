"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``) with its defaults, as a sharded plan.

Read in torch 2.13.0, ``torch/distributed/fsdp/_fully_shard/``:

- ``_fully_shard.py`` (``fully_shard``): one parameter group per ``fully_shard`` call, holding
  the module's parameters not already in a group of a submodule (called bottom-up: one per
  transformer block, then the root). ``reshard_after_forward=None`` means True for non-root
  modules and False for the root (``_fsdp_state.py``, ``_lazy_init``).
- ``_fsdp_param_group.py``: the all-gather and reduce-scatter run on streams of their own
  (``all_gather_stream``, ``reduce_scatter_stream``, ``FSDPCommContext.lazy_init``); in the
  backward ``_backward_prefetch`` all-gathers the group before the current one in
  post-forward order (one ahead); in the forward the next group's all-gather is issued by its
  pre-forward hook while the current group computes (implicit prefetch, one ahead).

- ``_fsdp_param.py`` (``_init_sharded_param``): each parameter is sharded on its first
  dimension into ``torch.chunk`` pieces, every rank holding ``ceil(rows / world_size)`` rows
  (zero-padded), so the all-gather and the reduce-scatter (``_fsdp_collectives.py``,
  ``foreach_reduce``: ``_get_dim0_padded_size``) move the padded sizes.
- ``_fsdp_param_group.py`` (``_init_mp_dtypes``): a group's trainable parameters must share one
  dtype ("FSDP expects uniform original parameter dtype"), checked at the first forward.

- ``_fsdp_state.py``: the root group is all-gathered first, by the root's pre-forward
  (``FSDPState._root_pre_forward``, then ``_pre_forward``), never resharded after the forward
  (``_lazy_init`` sets its ``post_forward_mesh_info`` to None: no all-gather in the backward),
  and reduce-scattered last, in ``_root_post_backward_final_callback`` (its forward inputs need
  no gradient, so no post-backward hook fires for it earlier).
- ``_fsdp_param_group.py`` (``FSDPParamGroup.post_backward``): only parameters with a gradient
  are reduce-scattered (``fsdp_params_with_grad``); a group without one issues none. Frozen
  parameters (``requires_grad=False``) are all-gathered with their group.

The plan: a unit per block (layers sharing a name prefix that ends in a block index, such as
``transformer.h.3``) and the root's own layers (embeddings, final norm, head) as the plan's root
group (:attr:`~schedopt.model.plan.Sharding.root`), or a unit per top-level child
(``wrap="child"``, no root group); mode ``full``; prefetch 1 and 1; two streams;
``reduce_dtype`` the communication dtype (``MixedPrecisionPolicy``); padding ``dim0``; the
trace's frozen parameters gathered, not reduced. A unit (or, with ``wrap="block"``, the root's
layers together, FSDP2's one root group) whose trainable tensors have several dtypes is refused,
as FSDP2 refuses it.
"""

from __future__ import annotations

from typing import Literal

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Dtype, Trace
from schedopt.policies.common import positive
from schedopt.policies.units import block_key, block_units_with_root, child_units, sharded_plan

__all__ = ["check_group_dtypes", "fsdp"]


def check_group_dtypes(trace: Trace, groups: list[list[str]], field_name: str) -> None:
    """Refuse a parameter group whose tensors have several dtypes, as FSDP2 does.

    Parameters
    ----------
    trace
        The instance; a tied tensor counts in the group of its earliest layer, frozen
        parameters not at all (``_init_mp_dtypes`` checks the trainable ones).
    groups
        Layer names per FSDP2 parameter group.
    field_name
        Reported in the error.

    Raises
    ------
    SchedoptError
        Naming the first such group and its dtypes (torch 2.13 ``_init_mp_dtypes``: "FSDP
        expects uniform original parameter dtype").
    """
    owner = trace.tensor_layer_by_name
    index = {la.name: i for i, la in enumerate(trace.layers)}
    for k, group in enumerate(groups):
        members = {index[n] for n in group}
        dtypes = sorted({t.dtype for t in trace.tensor_list if owner[t.name] in members})
        if len(dtypes) > 1:
            raise SchedoptError(f"FSDP2 refuses a parameter group of several dtypes "
                                f"({', '.join(dtypes)}): its trainable parameters must share "
                                "one", f"{field_name}[{k}]", group[:3])


def fsdp(
    trace: Trace,
    cluster: Cluster,
    *,
    wrap: Literal["block", "child"] = "block",
    reshard_after_forward: bool = True,
    forward_prefetch: int = 1,
    backward_prefetch: int = 1,
    reduce_dtype: Dtype | None = None,
) -> Plan:
    """FSDP2 ``fully_shard`` per block (or per top-level child).

    Parameters
    ----------
    trace, cluster
        The instance.
    wrap
        ``block``: a unit per block, the root's layers the root group (without a block, or
        when either owns no tensor: the root's layers a unit per contiguous run); ``child``: a
        unit per top-level child (first component of the layer name), no root group.
    reshard_after_forward
        True: mode ``full``; False: ``grad-op`` (parameters kept from forward to backward).
    forward_prefetch, backward_prefetch
        All-gathers issued ahead (FSDP2's implicit default: 1 each).
    reduce_dtype
        Dtype of the reduce-scatter (``MixedPrecisionPolicy.reduce_dtype``; None: the
        parameters').

    Returns
    -------
    Plan
        A sharded plan bound to ``trace`` and ``cluster``.
    """
    for name, value in (("forward_prefetch", forward_prefetch),
                        ("backward_prefetch", backward_prefetch)):
        positive(value, f"fsdp.{name}", allow_zero=True)
    units, root = block_units_with_root(trace) if wrap == "block" else (child_units(trace), [])
    names = [[trace.layers[i].name for i in unit] for unit in units]
    check_group_dtypes(trace, names, "fsdp.units")
    if wrap == "block":  # the root's own layers are one FSDP2 group
        own = [la.name for la in trace.layers if block_key(la.name) is None]
        check_group_dtypes(trace, [own], "fsdp.root")
    knobs = {"wrap": wrap, "reshard_after_forward": reshard_after_forward,
             "forward_prefetch": forward_prefetch, "backward_prefetch": backward_prefetch,
             "reduce_dtype": reduce_dtype}
    return sharded_plan("fsdp", trace, cluster, units, knobs,
                        mode="full" if reshard_after_forward else "grad-op",
                        forward_prefetch=forward_prefetch, backward_prefetch=backward_prefetch,
                        streams=2, comm_dtype=reduce_dtype, padding="dim0", root=root)
