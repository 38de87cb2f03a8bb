"""Sentence-transformers models as qaindex models: the tokenizer's [CLS]/[SEP] template against
HuggingFace's, the export of a tiny randomly initialised BERT sentence-transformer (built here,
nothing downloaded) against sentence-transformers, the same for a tiny MPNet (no token types,
positions counted from the padding), refusals, and (QAINDEX_SLOW=1) the real all-MiniLM-L6-v2 of
the offline package."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qaindex.text.tokenizer import Tokenizer, TokenizerError
from tests.helpers.tiny_transformers import save_sentence_transformer, tiny_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = [
    "how", "do", "i", "reset", "my", "password", "refund", "##s", "are", "paid", "within", "days", "of", "a",
    "cancel", "##led", "order", "the", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "cafe", "naive",
    "hello", "world", "straße", "ab", "##c", "##d", "1", "2", "3", "14", "中", "文", "!", ",", ".", "?", "'", "-",
    "(", ")", ":", "$", "%", "@", "#", "&", "e", "g", "u", "s", "t", "don", "stop", "believ", "##ing",
]  # fmt: skip
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
TEXTS = [
    "How do I reset my password?",
    "Refunds are paid within 14 days of a cancelled order.",
    "Héllo naïve café — Straße!",
    "中文 and emoji 🙂 abcd abd",
    "tabs\tand\nnew lines, a control\x0bchar\x00",
    "don't stop-believing: 3.14 (e.g. U.S.) #1 @home $5 50% a&b",
    "",
    "a",
    " ".join(["the quick brown fox jumps over the lazy dog"] * 12),
]


def _hf_tokenizer(tmp: Path):  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    (tmp / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True}
    (tmp / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return transformers.AutoTokenizer.from_pretrained(str(tmp))


def test_cls_sep_template_and_truncation_match_huggingface(tmp_path: Path) -> None:
    hf = _hf_tokenizer(tmp_path)
    tok = Tokenizer(VOCAB, cls_token="[CLS]", sep_token="[SEP]")
    many = TEXTS * 3  # 16 texts or more take the ragged batch path
    for limit in (None, 64, 7, 3, 2):
        want = hf(many, truncation=limit is not None, max_length=limit)["input_ids"]
        assert [tok.encode(t, limit) for t in many] == want, limit
        assert tok.encode_many(many, limit) == want, limit
        if limit is not None:
            ids, mask = tok.encode_batch(many, limit)
            assert [row[m == 1].tolist() for row, m in zip(ids, mask, strict=True)] == want
    assert tok.tokenize("hello world") == ["hello", "world"]  # tokenize never adds them
    assert tok.encode("hello world", 1) == [2]


def test_cls_sep_config_round_trip_and_errors(tmp_path: Path) -> None:
    tok = Tokenizer(VOCAB, cls_token="[CLS]", sep_token="[SEP]")
    config = tok.config()
    assert (config["cls_token"], config["sep_token"]) == ("[CLS]", "[SEP]")
    tok.save_vocab(tmp_path / "vocab.txt")
    again = Tokenizer.from_config(json.loads(json.dumps(config)), tmp_path)
    assert again.encode("reset my password", 4) == tok.encode("reset my password", 4) == [2, 8, 9, 3]
    assert "cls_token" not in Tokenizer(VOCAB).config()  # older readers still read every other model
    with pytest.raises(TokenizerError, match="cls_token and sep_token go together"):
        Tokenizer(VOCAB, cls_token="[CLS]")
    with pytest.raises(TokenizerError, match=r"sep_token '\[EOS\]' is not in the vocabulary"):
        Tokenizer(VOCAB, cls_token="[CLS]", sep_token="[EOS]")


# ------------------------------------------------------------------------ export (torch)


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer BERT with mean pooling and normalisation, saved by
    sentence-transformers (no download)."""
    root = tmp_path_factory.mktemp("tiny-st")
    hf_dir = root / "hf"
    hf_dir.mkdir()
    _hf_tokenizer(hf_dir).save_pretrained(hf_dir)
    return save_sentence_transformer(tiny_config("bert", len(VOCAB), 64), hf_dir, root / "st")


@pytest.mark.torch
def test_tiny_sentence_transformer_exports_with_parity(tiny_st: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    import qaindex.cli
    from qaindex import Model, Ranker
    from qaindex.text.lexical import tokenizer_available

    result = CliRunner().invoke(qaindex.cli.main, ["export-model", str(tiny_st), "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert "parity with sentence-transformers: smallest cosine" in result.stdout
    # progress, each with its time (the libraries may print warnings between)
    steps = [line.split(" (")[0] for line in result.stderr.splitlines() if line.startswith("export-model: ")]
    assert steps == [
        "export-model: loading torch and the export package",
        f"export-model: loading {tiny_st} with sentence-transformers",
        "export-model: checking the tokenizer against sentence-transformers'",
        steps[3],
        "export-model: checking parity: onnxruntime against torch",
        "export-model: checking parity: qaindex's vectors against sentence-transformers'",
        f"export-model: writing {tmp_path / 'm'}",
        "export-model: fitting its fusion and calibrating its scores on the example FAQ",
    ]
    assert steps[3].startswith("export-model: exporting the encoder to ONNX (") or steps[3] == (
        "export-model: exporting the encoder to ONNX"
    )
    model = Model.load(tmp_path / "m", device="cpu")
    manifest = model.manifest
    assert manifest["geometry"] == {"name": "cosine"} and manifest["dimension"] == 32
    assert manifest["max_tokens"] == {"question": 24, "answer": 24}
    assert manifest["tokenizer"]["cls_token"] == "[CLS]"
    assert manifest["metrics"]["parity"]["sentence_transformers_min_cosine"] > 1 - 1e-5
    # calibrated on the example FAQ shipped with the package, with off-topic questions; a fusion of its own
    calibration = manifest["calibration"]
    assert calibration["data"] == "example FAQ (qaindex/eval/data/faq.jsonl)" and calibration["method"] == "platt"
    assert calibration["offtopic"]["questions"] > 0 and calibration["pairs"] > 732
    assert model.calibration.calibrated
    assert "calibrated on the example FAQ" in result.output
    if tokenizer_available():  # the hybrid extra: a fusion fitted on the FAQ, the hybrid score on its fused value
        fusion = manifest["fusion"]
        assert fusion["rule"] == "adaptive" and fusion["fitted_on"] == ["example FAQ (qaindex/eval/data/faq.jsonl)"]
        assert set(fusion) >= {"a", "b", "d", "e", "terms", "worst_margin", "margins"}
        assert fusion["fused_score"] == calibration["hybrid"]["fused_score"]

    st = SentenceTransformer(str(tiny_st), device="cpu")
    rng = np.random.default_rng(0)
    answers = [" ".join(rng.choice(WORDS, size=rng.integers(1, 30))) for _ in range(120)]
    questions = [" ".join(rng.choice(WORDS, size=rng.integers(1, 8))) for _ in range(20)]
    want_a = st.encode(answers, normalize_embeddings=True)
    want_q = st.encode(questions, normalize_embeddings=True)
    got_a = model.encode(answers, role="answer")
    np.testing.assert_allclose(got_a, want_a, atol=1e-5)
    # the index's top 10 is sentence-transformers' exact cosine top 10, cosines within 1e-4
    ranker = Ranker.build(
        [{"id": i, "answer": a} for i, a in enumerate(answers)], model=model, device="cpu", hybrid=False
    )
    sims = want_q.astype(np.float64) @ want_a.T.astype(np.float64)
    for i, q in enumerate(questions):
        hits = ranker.search(q, 10)
        want = np.argsort(-sims[i], kind="stable")[:10]
        assert sorted(h.id for h in hits) == sorted(want.tolist())
        np.testing.assert_allclose([h.raw_score for h in hits], sims[i, [h.id for h in hits]], atol=1e-4)


@pytest.mark.torch
def test_an_int8_export_stores_int8_weights_and_keeps_its_vectors_close(tiny_st: Path, tmp_path: Path) -> None:
    import onnx
    from qaindex_export.exporting.onnx_graph import ExportError
    from qaindex_export.exporting.sentence_transformer import QUANTIZED_MIN_COSINE, export_sentence_transformer

    import qaindex.cli
    from qaindex import Model

    result = CliRunner().invoke(
        qaindex.cli.main, ["export-model", str(tiny_st), "--out", str(tmp_path / "q"), "--quantize", "int8"]
    )
    assert result.exit_code == 0, result.output
    assert "export-model: quantizing the encoder's weights to int8" in result.stderr
    assert "int8 weights (float encoder max diff" in result.stdout
    plain = export_sentence_transformer(tiny_st, tmp_path / "f", calibrate=False)
    quantized, floats = Model.load(tmp_path / "q", device="cpu"), Model.load(plain, device="cpu")
    graph = onnx.load(str(tmp_path / "q" / quantized.manifest["graphs"]["answer_encoder"]))
    kinds = {onnx.helper.tensor_dtype_to_np_dtype(t.data_type) for t in graph.graph.initializer}
    assert np.dtype(np.int8) in kinds and any(n.op_type == "DynamicQuantizeLinear" for n in graph.graph.node)
    metrics = quantized.manifest["metrics"]
    assert metrics["quantization"]["weights"] == "int8, one scale per output channel"
    worst = metrics["parity"]["sentence_transformers_min_cosine"]
    assert QUANTIZED_MIN_COSINE <= worst < 1 - 1e-5  # quantized: close, not equal
    assert quantized.manifest["training"]["quantized"] == "int8"
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 20))) for _ in range(50)]
    a, b = quantized.encode(texts, role="answer"), floats.encode(texts, role="answer")
    assert float(np.min(np.sum(a * b, axis=1))) > QUANTIZED_MIN_COSINE - 0.01
    with pytest.raises(ExportError, match="quantize must be None or \"int8\", got 'int4'"):
        export_sentence_transformer(tiny_st, tmp_path / "x", calibrate=False, quantize="int4")
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def tiny_mpnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer MPNet (MPNet's tokenizer: ``<s> … </s>``, ``<pad>`` = 1, no
    token types; positions numbered from the padding) with mean pooling, saved by sentence-transformers."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("tiny-mpnet")
    (root / "vocab.txt").write_text("\n".join(["<s>", "<pad>", "</s>", "<unk>", *VOCAB, "<mask>"]) + "\n")
    tokenizer = transformers.MPNetTokenizer(str(root / "vocab.txt"))
    hf_dir = root / "hf"
    tokenizer.save_pretrained(hf_dir)
    return save_sentence_transformer(tiny_config("mpnet", len(VOCAB) + 5, 40), hf_dir, root / "st")


@pytest.mark.torch
def test_tiny_mpnet_exports_with_parity(tiny_mpnet: Path, tmp_path: Path) -> None:
    from qaindex_export.exporting.sentence_transformer import export_sentence_transformer
    from sentence_transformers import SentenceTransformer

    from qaindex import Model

    export_sentence_transformer(tiny_mpnet, tmp_path / "m", calibrate=False)
    model = Model.load(tmp_path / "m", device="cpu")
    tokenizer = model.manifest["tokenizer"]
    assert (tokenizer["cls_token"], tokenizer["sep_token"], tokenizer["pad_token"]) == ("<s>", "</s>", "<pad>")
    assert model.manifest["metrics"]["parity"]["sentence_transformers_min_cosine"] > 1 - 1e-5
    st = SentenceTransformer(str(tiny_mpnet), device="cpu")
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 40))) for _ in range(40)]  # padded batches
    want = st.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(model.encode(texts, role="answer", batch_size=7), want, atol=1e-5)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.torch
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: (d / "modules.json").write_text(
                json.dumps([*json.loads((d / "modules.json").read_text()),
                            {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}])
            ),
            "modules.json: modules are {types}; qaindex exports Transformer, Pooling and optionally Normalize "
            "(in that order)",
        ),
        (
            lambda d: (d / "tokenizer_config.json").write_text(
                json.dumps({**json.loads((d / "tokenizer_config.json").read_text()),
                            "tokenizer_class": "XLMRobertaTokenizer"})
            ),
            "tokenizer_config.json: tokenizer_class is 'XLMRobertaTokenizer'; qaindex reproduces BERT's WordPiece "
            "tokenizer (BertTokenizer or BertTokenizerFast or MPNetTokenizer or MPNetTokenizerFast) only, so this "
            "model cannot be exported",
        ),
        (
            lambda d: (d / "tokenizer_config.json").write_text(
                json.dumps({**json.loads((d / "tokenizer_config.json").read_text()), "do_lower_case": False})
            ),
            "tokenizer_config.json: do_lower_case is False; qaindex reproduces uncased BERT tokenizers only "
            "(a cased vocabulary is not supported)",
        ),
    ],
    ids=["dense-module", "other-tokenizer", "cased"],
)  # fmt: skip
def test_unsupported_sources_are_refused_by_name(tiny_st: Path, tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    import qaindex.cli

    src = _copy(tiny_st, tmp_path / "src")
    edit(src)
    result = CliRunner().invoke(qaindex.cli.main, ["export-model", str(src), "--out", str(tmp_path / "m")])
    assert result.exit_code == 1
    types = [m["type"] for m in json.loads((src / "modules.json").read_text())]
    assert _error_after_progress(result.output) == f"Error: {src}/{message}".replace("{types}", str(types))
    assert not (tmp_path / "m").exists()


@pytest.mark.torch
def test_pickled_weights_are_refused_unloaded(tiny_st: Path, tmp_path: Path) -> None:
    import safetensors.torch
    import torch

    import qaindex.cli

    src = _copy(tiny_st, tmp_path / "src")
    weights = safetensors.torch.load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    torch.save(weights, src / "pytorch_model.bin")  # a pickle: loading it could run code
    result = CliRunner().invoke(qaindex.cli.main, ["export-model", str(src), "--out", str(tmp_path / "m")])
    assert result.exit_code == 1
    assert _error_after_progress(result.output) == (
        f"Error: {src / 'pytorch_model.bin'}: the weights are a pickle, refused (loading a pickle can run any "
        "code in it); convert them to model.safetensors"
    )
    assert not (tmp_path / "m").exists()
    (src / "pytorch_model.bin").unlink()
    result = CliRunner().invoke(qaindex.cli.main, ["export-model", str(src), "--out", str(tmp_path / "m")])
    assert _error_after_progress(result.output) == (
        f"Error: {src}: no model.safetensors; qaindex exports safetensors weights only"
    )


def _error_after_progress(output: str) -> str:
    """The one error line ending ``export-model``'s output; every line before it is a progress line."""
    *progress, last = output.splitlines()
    assert all(line.startswith("export-model: ") for line in progress), output
    return last


def test_cli_import_stays_light() -> None:
    """``import qaindex.cli`` loads neither torch nor the exporter (the command imports them)."""
    import subprocess
    import sys

    code = "import sys, qaindex.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in "
    code += (
        "('torch', 'sentence_transformers', 'transformers') or m == 'qaindex_export.exporting.sentence_transformer'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------ the real MiniLM (slow)


@pytest.mark.slow
@pytest.mark.torch
def test_minilm_exports_with_parity(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from qaindex_export.embeddings.spec import minilm_dir
    from sentence_transformers import SentenceTransformer

    import qaindex.cli
    from qaindex import Model, Ranker

    result = CliRunner().invoke(qaindex.cli.main, ["export-model", "minilm", "--out", str(tmp_path / "minilm")])
    assert result.exit_code == 0, result.output
    model = Model.load(tmp_path / "minilm", device="cpu")
    assert model.dimension == 384 and model.max_tokens == {"question": 256, "answer": 256}
    faq = [json.loads(line) for line in (Path(__file__).parents[2] / "examples" / "faq.jsonl").open(encoding="utf-8")]
    answers = [r["answer"] for r in faq]
    questions = [q for r in faq for q in r.get("questions", [])][:60]
    st = SentenceTransformer(os.fspath(minilm_dir()), device="cpu", local_files_only=True)
    want_a = st.encode(answers, normalize_embeddings=True).astype(np.float64)
    want_q = st.encode(questions, normalize_embeddings=True).astype(np.float64)
    np.testing.assert_allclose(model.encode(answers, role="answer"), want_a, atol=1e-4)
    ranker = Ranker.build(
        [{"id": i, "answer": a} for i, a in enumerate(answers)], model=model, device="cpu", hybrid=False
    )
    sims = want_q @ want_a.T
    for i, q in enumerate(questions):
        hits = ranker.search(q, 10)
        assert sorted(h.id for h in hits) == sorted(np.argsort(-sims[i], kind="stable")[:10].tolist())
        np.testing.assert_allclose([h.raw_score for h in hits], sims[i, [h.id for h in hits]], atol=1e-4)
