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

Three more architectures, chosen before they were measured (issue of the host side: a
convolutional, an attention and an embedding-heavy model beside the three above):

``convnet``
    ResNet-18's layout built by hand (a 7x7 stem, max pooling, BasicBlocks [2, 2, 2, 2] of
    widths 64-512 with batch norm, global pooling, 10 classes): 11.2 M parameters, 44.7 MB of
    gradients in 62 tensors, most of them small (batch norm); input ``4,3,64,64``.
``gpt_small``
    A causal decoder from ``transformers.GPT2Config`` (6 layers, hidden 256, 4 heads,
    vocabulary 16,384, 256 positions), ``GPT2Model`` without the tied head: 9.0 M parameters,
    36.0 MB of gradients in 76 tensors; input ``1,256`` token ids, so attention over 256
    positions.
``dlrm``
    Embedding-heavy, after DLRM: 8 tables ``nn.Embedding(40_000, 64)`` (dense gradients),
    their rows concatenated into an MLP 512-256-64: 20.6 M parameters, 82.5 MB of gradients,
    99% of them in the tables, little compute; input ``64,8`` ids (one per table and sample).

For ``benchmarks/gpu_ddp_buckets.py`` (a GPU, not the evidence above): ``resnet50`` and
``resnext50_32x4d``, torchvision's, built by :mod:`schedopt.measure.cnns`.
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


def convnet() -> Any:
    """ResNet-18's layout (BasicBlock x [2, 2, 2, 2], widths 64-512, batch norm), 10 classes."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x: Any) -> Any:
            y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (y + (x if self.down is None else self.down(x))).relu()

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, width, stride), Block(width, width, 1)]
        cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


def gpt_small() -> Any:
    """A 6-layer causal decoder (transformers GPT-2), hidden 256, vocabulary 16,384."""
    import transformers

    config = transformers.GPT2Config(vocab_size=16_384, n_positions=256, n_embd=256, n_layer=6,
                                     n_head=4, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Model(config)


def dlrm() -> Any:
    """8 embedding tables of 40,000 x 64 (dense gradients) feeding an MLP 512-256-64."""
    import torch
    import torch.nn as nn

    class Dlrm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList(nn.Embedding(40_000, 64) for _ in range(8))
            self.mlp = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 64))

        def forward(self, ids: Any) -> Any:
            rows = [t(ids[:, i]) for i, t in enumerate(self.tables)]
            return self.mlp(torch.cat(rows, dim=1))

    return Dlrm()


def resnet50() -> Any:
    """torchvision's ResNet-50 (:mod:`schedopt.measure.cnns`; ``benchmarks/gpu_ddp_buckets.py``):
    25.6 M parameters in 161 tensors; input ``B,3,224,224``."""
    from schedopt.measure.cnns import cnn_builders

    return cnn_builders()["resnet50"]()


def resnext50_32x4d() -> Any:
    """torchvision's ResNeXt-50 32x4d (:mod:`schedopt.measure.cnns`): 25.0 M parameters in 161
    tensors; input ``B,3,224,224``."""
    from schedopt.measure.cnns import cnn_builders

    return cnn_builders()["resnext50_32x4d"]()
