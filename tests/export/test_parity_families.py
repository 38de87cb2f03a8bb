"""Every model kind exports faithfully beyond the shapes it was traced with.

Each kind of :data:`qaindex_export.config.MODEL_KINDS` is trained for one epoch on the planted
task (tiny sizes) and written as a model directory by
:func:`qaindex_export.exporting.onnx_export.export_model`; its graphs, loaded from that directory as the
runtime loads them, are run by onnxruntime against the torch model on batch sizes, lengths and
(HRDE answers) chunk counts other than, and longer than, the example the graphs were traced
from (2 texts of 3 tokens; 2 answers of 2 chunks of 3 tokens).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from qaindex_export.config import MODEL_KINDS, TrainConfig  # noqa: E402
from qaindex_export.exporting.onnx_export import export_model  # noqa: E402
from qaindex_export.exporting.parity import Parity, padded_batch  # noqa: E402
from qaindex_export.networks.families import family  # noqa: E402
from qaindex_export.training.train import train  # noqa: E402

pytestmark = pytest.mark.torch

TINY = dict(
    embeddings="none", dim=8, embed_dim=6, batch_size=16, negatives=2, threads=1, device="cpu", epochs=1,
    seed=0, ball="clip", topics=2, max_chunks=32, max_chunk_tokens=6,
)  # fmt: skip
TEXTS = ((1, 1), (1, 4), (2, 2), (4, 9), (7, 33), (2, 90))  # (batch, length); traced (2, 3)
CHUNKED = (
    (1, 1, 1),
    (1, 5, 2),
    (3, 3, 4),
    (5, 7, 6),
    (2, 13, 3),
    (4, 24, 6),
)  # (batch, chunks, tokens); traced (2, 2, 3)
PAIRS = ((1, 1, 1), (1, 4, 70), (3, 9, 2), (6, 2, 33), (2, 41, 12))  # (n, question length, answer length)
TEXT_INPUTS = ["input_ids", "attention_mask"]
PAIR_INPUTS = ["question_ids", "question_mask", "answer_ids", "answer_mask"]


def chunked_batch(
    rng: np.random.Generator, vocab: int, batch: int, chunks: int, tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` (batch, chunks, tokens): the first text with every chunk full, random chunk
    counts and lengths, and (batch > 2) a one-chunk text and an empty text."""
    n_chunks = rng.integers(1, chunks + 1, size=batch)
    n_chunks[0] = chunks
    if batch > 2:
        n_chunks[1], n_chunks[-1] = 1, 0
    lengths = rng.integers(1, tokens + 1, size=(batch, chunks))
    lengths[0] = tokens
    lengths = np.where(np.arange(chunks)[None, :] < n_chunks[:, None], lengths, 0)
    mask = (np.arange(tokens)[None, None, :] < lengths[:, :, None]).astype(np.int64)
    ids = rng.integers(1, vocab, size=(batch, chunks, tokens)).astype(np.int64)
    return np.where(mask == 1, ids, 0), mask


class Graph:
    """One graph of a model directory, run by onnxruntime (external data beside it)."""

    def __init__(self, path: Path, inputs: list[str], output: str) -> None:
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs, self.output = inputs, output

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        return self.session.run([self.output], dict(zip(self.inputs, arrays, strict=True)))[0]


def _torch(function: Any, *arrays: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return function(*(torch.from_numpy(a) for a in arrays)).numpy()


@pytest.fixture(scope="module", params=MODEL_KINDS)
def exported(request: pytest.FixtureRequest, planted_data: dict, tmp_path_factory: pytest.TempPathFactory):
    """``(family, model, directory)``: the kind trained for one epoch on the planted task, exported."""
    config = TrainConfig.for_model(request.param, **TINY)  # the kind's own defaults, as qaindex train
    result = train(config, planted_data["train"], planted_data["dev"], log=None)
    directory = export_model(result, tmp_path_factory.mktemp("families") / request.param)
    return family(request.param), result.model.cpu().eval(), directory


def test_every_kind_is_faithful_beyond_the_traced_shapes(exported: tuple[str, Any, Path]) -> None:
    kind_family, model, directory = exported
    graphs = json.loads((directory / "manifest.json").read_text())["graphs"]
    rng = np.random.default_rng(7)
    check = Parity(1e-4)
    if kind_family == "attentive":  # AP-CNN / AP-biLSTM: one joint graph over the pair
        graph = Graph(directory / graphs["reranker"], PAIR_INPUTS, "scores")
        vocab = int(model.encoder.embedding.shape[0])
        for n, m, length in PAIRS:
            pair = (*padded_batch(rng, vocab, n, m, last=1), *padded_batch(rng, vocab, n, length, last=0))
            check.record("scores", graph(*pair), _torch(model, *pair))
        assert set(check.worst) == {"scores"}
        return
    if kind_family in ("dual", "sequence"):  # HyperQA / CosineQA / QA-CNN / QA-biLSTM: one encoder
        graph = Graph(directory / graphs["question_encoder"], TEXT_INPUTS, "vectors")
        vocab = int(model.encoder.embedding.shape[0])
        for batch, length in TEXTS:
            ids, mask = padded_batch(rng, vocab, batch, length, last=1 if batch == 2 else 0)
            check.record("encoder", graph(ids, mask), _torch(model, ids, mask))
        assert set(check.worst) == {"encoder"}
        return
    # RDE / RDE-LTC / HRDE / HRDE-LTC: question and answer encoders (HRDE answers chunked)
    question = Graph(directory / graphs["question_encoder"], TEXT_INPUTS, "vectors")
    answer = Graph(directory / graphs["answer_encoder"], TEXT_INPUTS, "vectors")
    vocab = int(model.embedding.shape[0])
    for batch, length in TEXTS:
        ids, mask = padded_batch(rng, vocab, batch, length, last=1 if batch == 2 else 0)
        check.record("question", question(ids, mask), _torch(model.encode_question, ids, mask))
        if not model.hierarchical:
            check.record("answer", answer(ids, mask), _torch(model.encode_answer, ids, mask))
    for shape in CHUNKED if model.hierarchical else ():
        ids, mask = chunked_batch(rng, vocab, *shape)
        check.record("answer", answer(ids, mask), _torch(model.encode_answer, ids, mask))
    assert set(check.worst) == {"question", "answer"}
