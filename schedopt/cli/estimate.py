"""``estimate``: a trace estimated from a model's shapes and a GPU profile (no GPU needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from schedopt.cli.common import JsonOpt, print_json, user_errors


def estimate_cmd(
    model: Annotated[str, typer.Argument(
        help="A shipped model name (gpt2, bert, resnet50, vgg16, llama-7b ...), a Hugging Face"
             " config.json (GPT-2, Llama/Mistral, GPT-NeoX, BERT) or a torchvision model name.")],
    gpu: Annotated[str, typer.Option("--gpu", help="GPU profile: k80, v100, a100,"
                                   " a100-40gb, h100, h200, or a profile JSON written by"
                                   " `schedopt bench-gpu`.")],
    dtype: Annotated[str, typer.Option("--dtype", help="Compute precision: bf16, fp16, tf32,"
                                       " fp32.")],
    batch: Annotated[int, typer.Option("--batch", help="Per-GPU micro-batch (samples).")],
    out: Annotated[Path, typer.Option("--out", help="Trace JSON to write.")],
    seq: Annotated[int | None, typer.Option("--seq", help="Sequence length (text models).")]
    = None,
    image_size: Annotated[int | None, typer.Option("--image-size", help="Input height and"
                                                   " width of image models in pixels"
                                                   " (default 224).")] = None,
    recompute: Annotated[bool, typer.Option("--recompute", help="Full activation"
                                            " recomputation: backward includes a forward.")]
    = False,
    accumulate: Annotated[int, typer.Option("--accumulate", help="Micro-batches per iteration"
                                            " (gradient accumulation).")] = 1,
    method: Annotated[str, typer.Option("--method", help="operator (size-dependent operator"
                                        " costs) or roofline (the shipped traces' method).")]
    = "operator",
    autocast: Annotated[bool, typer.Option("--autocast", help="Automatic mixed precision"
                                           " (torch.autocast to --dtype bf16 or fp16): float32"
                                           " parameters and gradients.")] = False,
    attention: Annotated[str, typer.Option("--attention", help="Attention path of text models:"
                                           " auto (the fused flash kernel where the GPU profile"
                                           " has it at --dtype, else eager), flash (the fused"
                                           " SDPA kernel: bf16 or fp16 on a profile with flash"
                                           " figures) or eager (matmul + softmax kernels, an"
                                           " s x s score tensor).")] = "auto",
    memory_format: Annotated[str, typer.Option("--memory-format", help="Activation layout of"
                                               " image models: channels_last (NHWC) or nchw"
                                               " (torch's default: cuDNN transposes around"
                                               " its tensor-core convolutions; operator"
                                               " method).")] = "channels_last",
    heads: Annotated[str, typer.Option("--heads", help="Output heads of BERT models: none (the"
                                       " encoder and pooler) or pretraining (masked-LM and"
                                       " next-sentence heads with their losses).")] = "none",
    lm_positions: Annotated[int, typer.Option("--lm-positions", help="With --heads pretraining:"
                                              " the masked-LM head on this many gathered"
                                              " positions per sequence (0: every token).")]
    = 0,
    ddp_copies: Annotated[bool, typer.Option("--ddp-copies", help="Price PyTorch DDP's reducer"
                                             " on the compute stream: each gradient copied"
                                             " into its bucket and scaled, and copied back"
                                             " after the all-reduce (DDP without"
                                             " gradient_as_bucket_view; operator method).")]
    = False,
    name: Annotated[str | None, typer.Option("--name", help="Trace name.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Estimate a trace from a model's shapes on a GPU profile (needs torch; docs/estimate.md)."""
    from schedopt.files import output_files
    from schedopt.measure.estimate import estimate

    with user_errors(), output_files({"--out": out}) as files:
        tr = estimate(model, gpu, dtype, batch, seq, recompute=recompute, accumulate=accumulate,
                      method=method, autocast=autocast, attention=attention,
                      memory_format=memory_format, heads=heads, lm_positions=lm_positions,
                      ddp_copies=ddp_copies, name=name, image_size=image_size)
        files.write_json(out, tr.model_dump(mode="json", exclude_none=True))
    fwd = sum(la.forward_s for la in tr.layers)
    bwd = sum(la.backward_s for la in tr.layers)
    summary = {"trace": str(out), "name": tr.name, "layers": len(tr.layers),
               "tensors": tr.num_tensors, "gradient_bytes": tr.total_bytes,
               "forward_s": fwd, "backward_s": bwd, "update_s": tr.update_s}
    if as_json:
        print_json(summary)
    else:
        typer.echo(f"wrote {out}: {tr.name}, {len(tr.layers)} layers, {tr.num_tensors} tensors,"
                   f" {tr.total_bytes / 2**20:.1f} MiB of gradients; forward"
                   f" {fwd * 1e3:.3f} ms, backward {bwd * 1e3:.3f} ms, update"
                   f" {tr.update_s * 1e3:.3f} ms")
