"""``estimate --heads pretraining [--lm-positions N]``: BERT's pre-training heads and losses,
checked against the model's own modules and shapes, and the bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError

pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedopt.measure.estimate import estimate

runner = CliRunner()
BATCH, SEQ, VOCAB = 2, 128, 30522


def _layers(trace: object) -> dict[str, tuple[float, float]]:
    return {la.name.removeprefix("bert."): (la.forward_s, la.backward_s)
            for la in trace.layers}  # type: ignore[attr-defined]


def _unique_params() -> int:
    """Parameters of transformers' BertForPreTraining (BERT-base), tied ones once."""
    import torch
    from transformers import BertConfig, BertForPreTraining

    with torch.device("meta"):
        model = BertForPreTraining(BertConfig())
    return sum(p.numel() for p in model.parameters())  # parameters() de-duplicates ties


def test_heads_add_their_layers_and_leave_the_encoder_alone() -> None:
    plain = estimate("bert-base", "a100", "tf32", BATCH, SEQ)
    heads = estimate("bert-base", "a100", "tf32", BATCH, SEQ, heads="pretraining")
    base, full = _layers(plain), _layers(heads)
    added = set(full) - set(base)
    assert added == {"cls.predictions", "cls.predictions.transform.dense",
                     "cls.predictions.transform.LayerNorm",
                     "cls.predictions.decoder", "cls.seq_relationship"}, added
    # every encoder layer costs the same; the embeddings' backward now also takes the tied
    # decoder's weight gradient, so only its forward is compared
    for name, cost in base.items():
        if name == "embeddings.word_embeddings":
            assert full[name][0] == cost[0]
        elif name != "pooler.dense":  # the pooler's output now feeds a loss
            assert full[name] == pytest.approx(cost), name
    assert heads.total_bytes == 4 * _unique_params()  # float32 gradients, the tie counted once
    assert heads.name.endswith("-pretraining") and "BertForPreTraining" in heads.source


def test_lm_positions_gather_before_the_head() -> None:
    log_all: list = []
    log_few: list = []
    every = estimate("bert-base", "a100", "tf32", BATCH, SEQ, heads="pretraining", log=log_all)
    few = estimate("bert-base", "a100", "tf32", BATCH, SEQ, heads="pretraining",
                   lm_positions=20, log=log_few)
    vocab_all = [r for r in log_all if r[2] and r[2][-1] == VOCAB and r[0] in ("mm", "addmm")]
    vocab_few = [r for r in log_few if r[2] and r[2][-1] == VOCAB and r[0] in ("mm", "addmm")]
    assert [r[2] for r in vocab_all] == [(BATCH * SEQ, VOCAB)]
    assert [r[2] for r in vocab_few] == [(BATCH * 20, VOCAB)]
    assert vocab_few[0][3] == pytest.approx(vocab_all[0][3] * 20 / SEQ)  # FLOPs
    gathers = [r for r in log_few if r[0] == "index_select"]
    assert [r[2] for r in gathers] == [(BATCH * 20, 768)]
    assert not any(r[0] == "index_select" for r in log_all)
    head = _layers(few)["cls.predictions.decoder"]
    assert head[0] < _layers(every)["cls.predictions.decoder"][0]
    assert few.name.endswith("-pretraining-lm20") and "20 gathered positions" in few.source


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"heads": "mlm"}, "unknown heads"),
    ({"heads": "pretraining", "lm_positions": 129}, "--lm-positions"),
    ({"heads": "pretraining", "lm_positions": True}, "--lm-positions"),
    ({"lm_positions": 20}, "--heads pretraining only"),
])
def test_library_errors_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(SchedoptError, match=message):
        estimate("bert-base", "a100", "tf32", BATCH, SEQ, **kwargs)


def test_heads_apply_to_bert_only() -> None:
    with pytest.raises(SchedoptError, match="BERT models only"):
        estimate("gpt2", "a100", "tf32", BATCH, SEQ, heads="pretraining")


@pytest.mark.parametrize("args", [["--heads", "pretraining", "--lm-positions", "-1"],
                                  ["--heads", "all"], ["--lm-positions", "5"]])
def test_cli_refuses_bad_heads(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "bert-base", "--gpu", "a100", "--dtype", "tf32",
                              "--batch", "2", "--seq", "128", *args, "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output
    assert "--heads" in lines[0] or "--lm-positions" in lines[0]
    assert not out.exists()


def test_cli_writes_a_pretraining_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "bert-base", "--gpu", "v100", "--dtype", "fp16",
                              "--batch", "2", "--seq", "128", "--heads", "pretraining",
                              "--lm-positions", "20", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "bert-base-v100-fp16-b2-pretraining-lm20" in res.output and out.exists()
