"""Long answers: a static encoder reads them whole; where a model cuts, the build says so."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex import Model, ModelFormatError, Ranker
from qaindex.cli import main
from qaindex.model import BATCH_TOKENS_PER_ROW, STATIC_ANSWER_TOKENS, _groups

ROOT = Path(__file__).resolve().parents[2]
FAQ = [json.loads(line) for line in (ROOT / "examples" / "faq.jsonl").read_text(encoding="utf-8").splitlines()]
LONG = " ".join(r["answer"] for r in FAQ[:12])  # a multi-paragraph answer, over 128 word pieces


@pytest.fixture(scope="module")
def model() -> Model:
    return Model.load(None, device="cpu")


def test_the_built_in_model_reads_long_answers_whole(model: Model) -> None:
    assert model.manifest["static_encoder"] is True and model.manifest["max_tokens"]["answer"] == 128
    assert model.max_tokens["answer"] == STATIC_ANSWER_TOKENS
    pieces = len(model.tokenizer.encode(LONG))
    assert 128 < pieces < STATIC_ANSWER_TOKENS
    corpus = [{"id": "long", "answer": LONG}, *FAQ[12:]]
    ranker = Ranker.build(corpus, model=model, question_keys=False)
    stored = np.asarray(ranker._vectors)[0]
    whole = model.encode([LONG], role="answer")[0]
    np.testing.assert_allclose(stored, whole, atol=1e-6)
    cutting = Model.load(None, device="cpu")
    cutting.max_tokens["answer"] = 128  # what the manifest's max_tokens alone would read
    assert np.abs(stored - cutting.encode([LONG], role="answer")[0]).max() > 1e-3  # the tail counts
    # the long answer's last paragraph finds it first; cut at 128 word pieces, its tail is never read
    last = FAQ[11]["answer"]
    assert ranker.search(last, k=1, hybrid=False)[0].id == "long"
    cut_ranker = Ranker.build(corpus, model=cutting, question_keys=False)
    assert cut_ranker.search(last, k=1, hybrid=False)[0].id != "long"
    assert ranker.build_report == {
        "cuts": {"answers": len(corpus), "limit": STATIC_ANSWER_TOKENS, "cut": 0, "tokens_dropped": 0, "longest": 0}
    }
    assert cut_ranker.build_report["cuts"]["cut"] == 1  # type: ignore[index]


def test_answers_over_the_static_limit_are_cut_and_counted(model: Model) -> None:
    ranker = Ranker.build([{"answer": "word " * (STATIC_ANSWER_TOKENS + 100)}, {"answer": "short"}], model=model)
    assert ranker.build_report is not None
    assert ranker.build_report["cuts"] == {
        "answers": 2, "limit": STATIC_ANSWER_TOKENS, "cut": 1, "tokens_dropped": 100,
        "longest": STATIC_ANSWER_TOKENS + 100,
    }  # fmt: skip


def test_a_cutting_model_reports_what_it_cut(faq_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A model without ``static_encoder`` cuts at its ``max_tokens``; the build counts the cut
    answers and word pieces left out exactly (brute force: the tokenizer on every answer)."""
    loaded = Model.load(faq_model)
    limit = loaded.max_tokens["answer"]
    words = [w for r in FAQ[:3] for w in r["answer"].split()]
    answers = [" ".join(words[: n % len(words) + 1] * (1 + n // 7)) for n in range(40)]
    lengths = [len(loaded.tokenizer.encode(a)) for a in answers]
    want = {
        "answers": 40, "limit": limit, "cut": sum(n > limit for n in lengths),
        "tokens_dropped": sum(max(0, n - limit) for n in lengths), "longest": max(lengths),
    }  # fmt: skip
    assert want["cut"] > 0
    corpus = tmp_path / "long.jsonl"
    corpus.write_text("".join(json.dumps({"answer": a}) + "\n" for a in answers), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="qaindex.ranker"):
        streamed = Ranker.build(corpus, model=loaded)
    assert streamed.build_report == {"cuts": want}
    assert Ranker.build([{"answer": a} for a in answers], model=loaded).build_report == {"cuts": want}
    assert f"{want['cut']} of 40 answers cut at the model's {limit} word pieces" in caplog.text
    result = CliRunner().invoke(
        main, ["build", str(corpus), "--index", str(tmp_path / "idx"), "--model", str(faq_model)]
    )
    assert result.exit_code == 0, result.output
    assert (
        f"answers:    {want['cut']} of 40 answers cut at the model's {limit} word pieces: "
        f"{want['tokens_dropped']:,} word pieces left out, the longest has {want['longest']}"
    ) in result.output


def test_batches_are_bounded_by_tokens() -> None:
    rng = np.random.default_rng(0)
    lengths = np.sort(rng.integers(1, 5000, size=700))
    for batch_size in (1, 7, 256):
        groups = list(_groups(lengths, batch_size))
        assert np.concatenate([np.arange(len(lengths))[g] for g in groups]).tolist() == list(range(len(lengths)))
        for g in groups:
            rows = g.stop - g.start
            assert 1 <= rows <= batch_size
            assert rows == 1 or rows * lengths[g.stop - 1] <= batch_size * BATCH_TOKENS_PER_ROW


def test_long_and_short_texts_encode_as_alone(model: Model) -> None:
    texts = [LONG * 8, "short", LONG, *[r["answer"] for r in FAQ[:40]]]
    together = model.encode(texts, role="answer", batch_size=4)
    alone = np.concatenate([model.encode([t], role="answer") for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_a_bad_static_encoder_field_is_refused(faq_model: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(faq_model, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["static_encoder"] = "yes"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFormatError) as info:
        Model.load(copy)
    assert str(info.value) == f"{copy / 'manifest.json'}: \"static_encoder\" must be true or false, got 'yes'"
