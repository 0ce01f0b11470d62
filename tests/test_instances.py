"""Every shipped instance loads, validates, simulates under every policy, and matches its recipe."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from schedopt.files import instances_dir, list_instances, load_cluster, load_json, load_trace
from schedopt.model.cluster import Cluster, ClusterFamily
from schedopt.model.trace import Trace
from schedopt.policies import POLICIES, make_plan
from schedopt.simulate.simulator import simulate
from tests.scripts import load_script

ROOT = instances_dir()
TRACE_NAMES = sorted(p.stem for p in (ROOT / "traces").glob("*.json"))
CLUSTER_NAMES = sorted(p.stem for p in (ROOT / "clusters").glob("*.json"))

#: reference/FACTS.md "Parameter counts": (parameters, tensors or None) per trace-name prefix.
FACTS_PARAMS = {
    "alexnet-": (61_100_840, 16),
    "vgg16-": (138_357_544, 32),
    "resnet50-": (25_557_032, 161),
    "resnet152-": (60_192_808, 467),
    "bert-base-": (109_482_240, None),
    "bert-large-": (335_141_888, None),
    "gpt2-124m-": (124_439_808, None),
    "gpt2-1.5b-": (1_557_611_200, None),
}
#: Large models for sharded plans, A100 and H100 only: sizes from transformers' LlamaConfig on the
#: meta device (the published Llama-2 7B and 70B counts).
LLAMA_PARAMS = {
    "llama-7b-": (6_738_415_616, 291),
    "llama-70b-": (68_976_648_192, 723),
}
ESTIMATED = [n for n in TRACE_NAMES
             if any(n.startswith(p) for p in {**FACTS_PARAMS, **LLAMA_PARAMS})]

#: Instances other modules depend on by name (the optimizer benchmarks among them).
REQUIRED_TRACES = [
    "resnet50-v100-b64",
    "gpt2-1.5b-a100-bf16",
    "synthetic-5000",
    "googlenet-k80-10gbe-2n",
    "googlenet-k80-10gbe-4n",
    "googlenet-k80-10gbe-8n",
]
REQUIRED_CLUSTERS = [
    "k80-pcie-4gpu",
    "dgx1-v100",
    "k80-4x4-10gbe",
    "dgx-a100-4n",
    "dgx-h100-4n",
    "10gbe-k80-family",
    "ib-fdr-56g-family",
    "dgx-a100-family",
    "dgx-h100-family",
    "bcaffe-osu-2n",
    "bcaffe-osu-4n",
    "bcaffe-osu-8n",
]

#: The multi-node cluster every trace is simulated on, and the trace every cluster runs.
PAIR_CLUSTER = "k80-4x4-10gbe"
PAIR_TRACE = "resnet50-v100-b64"


@cache
def generate_module() -> ModuleType:
    """instances/generate.py, imported as a module (torch is imported only when needed)."""
    return load_script("instances/generate.py", "schedopt_instances_generate")


def _simulate_all(trace: Trace, cluster: Cluster) -> None:
    for name in POLICIES:
        plan = make_plan(trace, cluster, name)
        sched = simulate(trace, cluster, plan)
        assert math.isfinite(sched.iteration_time_s), name
        assert sched.iteration_time_s >= trace.compute_s * (1 - 1e-9), name


# ------------------------------------------------------------------------------------ inventory
def test_inventory() -> None:
    assert len(TRACE_NAMES) >= 16
    assert len(CLUSTER_NAMES) >= 10
    assert set(REQUIRED_TRACES) <= set(TRACE_NAMES)
    assert set(REQUIRED_CLUSTERS) <= set(CLUSTER_NAMES)
    rows = list_instances()
    assert {r["name"] for r in rows} == set(TRACE_NAMES) | set(CLUSTER_NAMES)
    assert all(r["source"] for r in rows)


def test_every_model_on_two_gpu_generations() -> None:
    for prefix in FACTS_PARAMS:
        names = [n for n in ESTIMATED if n.startswith(prefix)]
        old = [n for n in names if "-k80-" in n or "-v100-" in n]
        new = [n for n in names if "-a100-" in n or "-h100-" in n]
        assert old and new, prefix


# ------------------------------------------------------------------------------------ traces
@pytest.mark.parametrize("name", TRACE_NAMES)
def test_trace_loads_and_simulates(name: str) -> None:
    tr = load_trace(name)
    assert tr.name == name
    assert tr.source.split(" ", 1)[0] in ("ESTIMATE", "MEASURED", "SYNTHETIC")
    assert tr.compute_s > 0
    if name.endswith("-measured"):  # a layer whose gradients are ready early is charged none
        assert all(la.backward_s >= 0 for la in tr.layers)
        assert sum(la.backward_s > 0 for la in tr.layers) >= len(tr.layers) / 2
    else:
        assert all(la.backward_s > 0 for la in tr.layers)
    _simulate_all(tr, load_cluster(PAIR_CLUSTER))


@pytest.mark.parametrize("name", ESTIMATED)
def test_parameter_counts_match_facts(name: str) -> None:
    want, want_tensors = next(v for p, v in {**FACTS_PARAMS, **LLAMA_PARAMS}.items()
                              if name.startswith(p))
    tr = load_trace(name)
    assert sum(t.numel for t in tr.tensor_list) == want
    if want_tensors is not None:
        assert tr.num_tensors == want_tensors


@pytest.mark.parametrize("name", ESTIMATED)
def test_gradient_dtypes(name: str) -> None:
    tr = load_trace(name)
    dtypes = {t.dtype for t in tr.tensor_list}
    if "-bf16" in name:
        assert dtypes == {"bfloat16"}
    elif "-fp16" in name:
        assert dtypes == {"float16"}
    else:
        assert dtypes == {"float32"}


MEASURED_GPU = [n for n in TRACE_NAMES if n.endswith("-measured") and "-h200-" in n]


def test_measured_gpu_traces_match_their_estimated_twins() -> None:
    assert len(MEASURED_GPU) == 4
    for name in MEASURED_GPU:
        tr = load_trace(name)
        twin = load_trace(name.replace("-h200-", "-h100-").removesuffix("-measured"))
        assert tr.source.startswith("MEASURED on one NVIDIA H200 by benchmarks/gpu_profiles.py")
        assert twin.source.startswith("ESTIMATE (not measured)")
        assert tr.batch_size == twin.batch_size
        assert [la.name for la in tr.layers] == [la.name for la in twin.layers]
        assert {t.name: (t.bytes, t.dtype) for t in tr.tensor_list} == {
            t.name: (t.bytes, t.dtype) for t in twin.tensor_list}
        assert all(la.forward_s > 0 for la in tr.layers) and tr.update_s > 0


def test_gpt2_lm_head_is_tied_to_the_embedding() -> None:
    tr = load_trace("gpt2-1.5b-a100-bf16")
    assert tr.layers[-1].name == "lm_head"
    assert [t.name for t in tr.layers[-1].tensors] == ["transformer.wte.weight"]
    assert tr.tensor_layer_by_name["transformer.wte.weight"] == 0
    assert tr.num_tensors == 580


def test_llama_on_a100_and_h100() -> None:
    for prefix in LLAMA_PARAMS:
        assert {n.split("-")[2] for n in ESTIMATED if n.startswith(prefix)} == {"a100", "h100"}


def test_llama_layers_are_module_names() -> None:
    """``-t fsdp`` addresses modules by the trace's layer names: they must be the real ones."""
    pytest.importorskip("transformers")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = generate_module().MODELS["llama-7b"]
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**spec.config))
    owners = {n for n, m in model.named_modules() if any(True for _ in m.parameters(False))}
    for name in ("llama-7b-a100-bf16", "llama-7b-h100-bf16"):
        tr = load_trace(name)
        assert {la.name for la in tr.layers} == owners
        assert tr.layers[0].name == "model.embed_tokens" and tr.layers[-1].name == "lm_head"
        assert {t.name for t in tr.tensor_list} == {n for n, _ in model.named_parameters()}
    tr70 = load_trace("llama-70b-a100-bf16")
    assert [la.name for la in tr70.layers[1:10]] == [
        f"model.layers.0.{m}" for m in ("input_layernorm", "self_attn.q_proj",
                                        "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "post_attention_layernorm",
                                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]


def test_resnet50_layout() -> None:
    tr = load_trace("resnet50-v100-b64")
    names = [la.name for la in tr.layers]
    assert names[:3] == ["conv1", "bn1", "layer1.0.conv1"]
    # torchvision's Bottleneck runs the downsample branch after bn3
    i = names.index("layer1.0.bn3")
    assert names[i + 1: i + 3] == ["layer1.0.downsample.0", "layer1.0.downsample.1"]
    assert names[-1] == "fc"


def test_synthetic_has_5000_tensors() -> None:
    tr = load_trace("synthetic-5000")
    assert tr.num_tensors == 5000
    assert tr.batch_size > 0


def test_synthetic_is_reproducible() -> None:
    fresh = generate_module().synthetic_trace()
    assert fresh.model_dump() == load_trace("synthetic-5000").model_dump()


# ------------------------------------------------------------------------------------ clusters
@pytest.mark.parametrize("name", CLUSTER_NAMES)
def test_cluster_loads_and_simulates(name: str) -> None:
    cl = load_cluster(name)
    assert cl.source or load_json(ROOT / "clusters" / f"{name}.json", "cluster")["source"]
    _simulate_all(load_trace(PAIR_TRACE), cl)


@pytest.mark.parametrize(
    ("family", "nodes", "fit"),
    [
        ("10gbe-k80-family", 8, (5.23e-4, 8.57e-10)),
        ("10gbe-k80-family", 16, (9.08e-4, 7.40e-10)),
        ("10gbe-k80-family", 4, None),
        ("ib-fdr-56g-family", 2, (2.55e-6, 9.84e-11)),
        ("ib-fdr-56g-family", 4, (4.20e-5, 2.06e-10)),
        ("ib-fdr-56g-family", 8, (9.75e-5, 3.06e-10)),
        ("ib-fdr-56g-family", 16, (2.36e-4, 4.06e-10)),
        ("dgx-a100-family", 2, None),
        ("dgx-h100-family", 16, None),
    ],
)
def test_families_carry_the_mgwfbp_fits(
    family: str, nodes: int, fit: tuple[float, float] | None
) -> None:
    cl = load_cluster(family, nodes=nodes)
    assert cl.nodes == nodes
    if fit is None:
        assert cl.allreduce is None
    else:
        assert cl.allreduce is not None
        assert (cl.allreduce.alpha_s, cl.allreduce.beta_s_per_byte) == fit
    _simulate_all(load_trace("googlenet-k80-10gbe-8n"), cl)


def test_hand_written_clusters_are_reproducible() -> None:
    """Each file is the script's, field for field: the same cluster, and no field the script
    would add or drop (fields added later are written only where they are not the default)."""
    gen = generate_module()
    for name, model in gen.clusters().items():
        data = load_json(ROOT / "clusters" / f"{name}.json", "cluster")
        kind = ClusterFamily if isinstance(model, ClusterFamily) else Cluster
        assert kind.model_validate(data) == model, name
        assert data == gen._dump(model), name


def test_current_machines_use_several_nics() -> None:
    for name in ("dgx-a100-4n", "dgx-h100-4n", "dgx1-v100-4n-ib-edr"):
        assert load_cluster(name).nics_per_node > 1


# ------------------------------------------------------------------------------------ recipes
@pytest.mark.torch
@pytest.mark.parametrize("name", ["alexnet-k80-b128", "resnet50-v100-b64"])
def test_estimated_cnn_traces_are_reproducible(name: str) -> None:
    pytest.importorskip("torch")
    gen = generate_module()
    spec = next(ts for ts in gen.ESTIMATED if ts.name == name)
    fresh = gen.estimate_trace(spec)
    assert fresh.model_dump() == load_trace(name).model_dump()


def test_generate_script_finds_reference_next_to_repo() -> None:
    expected = Path(__file__).resolve().parents[2] / "shared" / "reference"
    found = generate_module().DEFAULT_REFERENCE
    assert found == expected
