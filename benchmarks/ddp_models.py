"""Models of the DDP evidence (docs/validation.md, benchmarks/ddp_evidence.py), built from configs.

Each factory returns a fresh ``torch.nn.Module`` (random weights, nothing downloaded); every
parameter gets a gradient from the default loss of ``schedopt profile`` (the mean of the output),
so DDP runs without ``find_unused_parameters``.

``mlp``
    6 x Linear(1536, 1536) with ReLU: 14.2 M parameters, 56.7 MB of gradients in 12 tensors;
    input ``32,1536`` (float32).
``mlp12``
    12 x Linear(768, 768) with ReLU: 7.1 M parameters, 28.3 MB of gradients in 24 tensors,
    just over DDP's default 25 MiB cap, so default DDP overlaps almost nothing; input ``32,768``.
``bert_small``
    A BERT encoder from ``transformers.BertConfig`` (4 layers, hidden 256, 4 heads, FFN 1024,
    vocabulary 50,000, no pooler): 16.0 M parameters, 64 MB of gradients, half of them the word
    embedding; input ``2,64`` token ids (int64).
"""

from __future__ import annotations

from typing import Any


def mlp() -> Any:
    """The 6 x 1536^2 MLP."""
    import torch.nn as nn

    layers: list[Any] = []
    for _ in range(6):
        layers += [nn.Linear(1536, 1536), nn.ReLU()]
    return nn.Sequential(*layers)


def bert_small() -> Any:
    """A 4-layer BERT encoder (transformers), hidden 256, vocabulary 50,000."""
    import transformers

    config = transformers.BertConfig(vocab_size=50_000, hidden_size=256, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=1024,
                                     max_position_embeddings=128)
    return transformers.BertModel(config, add_pooling_layer=False)



def mlp12() -> Any:
    """12 x Linear(768, 768) with ReLU: 28.3 MB of gradients, a little over DDP's 25 MiB cap."""
    import torch.nn as nn

    layers: list[Any] = []
    for _ in range(12):
        layers += [nn.Linear(768, 768), nn.ReLU()]
    return nn.Sequential(*layers)
