"""RDE, RDE-LTC, HRDE and HRDE-LTC (Yoon et al., NAACL 2018) as bilinear dual encoders.

All four read word embeddings with a single-layer GRU whose weights are shared by questions
and answers (the paper, section 4.2: "The weight for the two GRU are shared"), and score a
pair by ``p = σ(qᵀ M e + b)``, trained with binary cross-entropy on the correct answer
(label 1) and sampled wrong answers (label 0)::

    RDE       q = h_Q (last real token's GRU state)     e = h_A
    RDE-LTC   q = h_Q                                   e = [h_A ; Σ_k p_k m_k],  p = softmax(h_Aᵀ m_k)
    HRDE      q = u_Q                                   e = u_A
    HRDE-LTC  q = u_Q                                   e = [u_A ; Σ_k p_k m_k],  p = softmax(u_Aᵀ m_k)

HRDE splits a text into chunks (sentences, :mod:`qaindex.text.chunking`), encodes each chunk with
the word-level GRU (its last real state ``h_c``) and reads ``h_1..h_C`` with a chunk-level GRU
whose last real state is ``u``. As in the paper's Ubuntu setup, where the shorter side was not
split, questions are one chunk (word GRU, then one chunk-GRU step); answers are chunked.
LTC (eq. 5) is applied to the answer side only (eqs. 6-7) with ``K`` = ``topics`` learned
vectors ``m_k`` of the encoding's size (so no extra projection is needed).

Served as a dual encoder (:mod:`qaindex.geometry.bilinear`): the question graph outputs ``q``, the
answer graph ``c = M e`` (``M`` folded in), the index searches the inner product ``q·c`` and
hits report ``σ(q·c + b)``.

Masking is by hand (no ``pack_padded_sequence``, which the dynamo exporter cannot export):
padded embeddings are zero, the GRU runs over the padded batch (right padding never reaches a
real position of a forward GRU) and the encoding is the state at the last real position
(a gather); a text (or chunk) without tokens encodes to the zero vector. Not implemented from
the paper: dropout (0.2-0.8 there).

Example
-------
>>> model = RecurrentQA("hrde-ltc", 12, hidden=4, embed_dim=3, topics=2)
>>> q = model.encode_question(torch.tensor([[2, 3, 0]]), torch.tensor([[1, 1, 0]]))
>>> c = model.encode_answer(torch.tensor([[[2, 3], [4, 0]]]), torch.tensor([[[1, 1], [1, 0]]]))
>>> tuple(q.shape), tuple(c.shape), tuple(model.score(q, c)[0].shape)
((1, 4), (1, 4), (1,))
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qaindex.geometry import bilinear
from qaindex.text.chunking import Chunking
from qaindex.text.tokenizer import Tokenizer

from .models import BallMap, embedding_parameter

__all__ = [
    "RECURRENT_MODELS",
    "AnswerEncoder",
    "BilinearScorer",
    "QuestionEncoder",
    "RecurrentQA",
    "build_recurrent_model",
    "cross_entropy_loss",
    "last_state",
]

RECURRENT_MODELS = ("rde", "rde-ltc", "hrde", "hrde-ltc")


def last_state(outputs: Tensor, mask: Tensor) -> Tensor:
    """The output at each row's last real position (batch, hidden); zero for an empty row.

    Example
    -------
    >>> out = torch.arange(12.0).view(2, 3, 2)
    >>> last_state(out, torch.tensor([[1, 1, 0], [0, 0, 0]])).tolist()
    [[2.0, 3.0], [0.0, 0.0]]
    """
    lengths = mask.to(torch.int64).sum(dim=1)
    index = (lengths - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, outputs.shape[2])
    state = torch.gather(outputs, 1, index).squeeze(1)
    return state * (lengths > 0).to(state.dtype).unsqueeze(1)


def cross_entropy_loss(positive: Tensor, negative: Tensor) -> Tensor:
    """Binary cross-entropy of logits: correct answers labelled 1, wrong ones 0.

    ``mean(-log σ(l⁺)) + mean(-log(1 - σ(l⁻)))``: the two halves are weighted equally
    whatever the number of negatives per positive (the paper's data is 1:1).

    Example
    -------
    >>> round(cross_entropy_loss(torch.zeros(2), torch.zeros(2, 3)).item(), 4)
    1.3863
    """
    pos = F.binary_cross_entropy_with_logits(positive, torch.ones_like(positive))
    neg = F.binary_cross_entropy_with_logits(negative, torch.zeros_like(negative))
    return pos + neg


def _gru(inputs: int, hidden: int) -> nn.GRU:
    """A single-layer GRU with orthogonal recurrent weights (the paper, after Saxe et al.)."""
    gru = nn.GRU(inputs, hidden, batch_first=True)
    with torch.no_grad():
        weight = gru.get_parameter("weight_hh_l0")
        for gate in weight.view(3, hidden, hidden):
            nn.init.orthogonal_(gate)
    return gru


class RecurrentQA(nn.Module):
    """One of :data:`RECURRENT_MODELS`: shared GRU encoder(s), optional LTC, bilinear score.

    Parameters
    ----------
    kind : {"rde", "rde-ltc", "hrde", "hrde-ltc"}
    vocab_size : int
    hidden : int
        GRU units ``d`` (also the served vector size).
    embeddings : numpy.ndarray (vocab_size, e), optional
        Pretrained embeddings; None initialises random rows of width ``embed_dim``.
    train_embeddings : bool, optional
        Update the embeddings (default: only when none are given).
    embed_dim : int
    topics : int
        LTC's ``K`` (``*-ltc`` only).
    chunking : Chunking, optional
        How answers are split (``hrde*``; needed by :meth:`encode_rows`).
    """

    geometry = "bilinear"
    role_aware = True  # the training loop encodes question and answer rows differently

    def __init__(
        self,
        kind: str,
        vocab_size: int,
        *,
        hidden: int = 200,
        embeddings: np.ndarray | None = None,
        train_embeddings: bool | None = None,
        embed_dim: int = 300,
        topics: int = 3,
        chunking: Chunking | None = None,
    ) -> None:
        super().__init__()
        if kind not in RECURRENT_MODELS:
            raise ValueError(f"unknown recurrent model {kind!r}; choose one of {RECURRENT_MODELS}")
        self.kind = kind
        self.hierarchical = kind.startswith("hrde")
        self.ltc = kind.endswith("-ltc")
        self.dim = int(hidden)
        self.topics = int(topics) if self.ltc else 0
        self.chunking = chunking
        self.embedding = embedding_parameter(vocab_size, embeddings, train_embeddings, embed_dim)
        self.word = _gru(int(self.embedding.shape[1]), self.dim)
        self.chunk = _gru(self.dim, self.dim) if self.hierarchical else None
        self.memory = nn.Parameter(torch.randn(self.topics, self.dim) / self.dim**0.5) if self.ltc else None
        width = 2 * self.dim if self.ltc else self.dim
        self.M = nn.Parameter(torch.cat([torch.eye(self.dim), torch.zeros(self.dim, width - self.dim)], dim=1))
        self.b = nn.Parameter(torch.zeros(()))
        self.ball = BallMap("none")  # no ball: keeps the training loop's bookkeeping uniform

    # -- the training loop's interface -------------------------------------------------------
    @property
    def encoder(self) -> RecurrentQA:
        """The model itself (the loop reads ``model.encoder.dim`` and ``.embedding``)."""
        return self

    @property
    def w_f(self) -> Tensor:
        """No distance weight (the loop logs it): 1."""
        return torch.ones(())

    @property
    def bias(self) -> float:
        return float(self.b.item())

    def score(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
        """Ranking score ``q·c + b`` (the logit; the served score is its σ) and distance ``-q·c``.

        ``query`` (..., d) broadcasts against ``candidates`` (..., d).
        """
        dot = (query * candidates).sum(-1)
        return dot + self.b, -dot

    # -- encoders ----------------------------------------------------------------------------
    def _words(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Word-level GRU: (n, t) → last real state (n, d)."""
        m = mask.to(torch.bool)
        z = F.embedding(ids, self.embedding) * m.unsqueeze(-1).to(self.embedding.dtype)
        out, _ = self.word(z)
        return last_state(out, m)

    def encode_question(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Questions (batch, seq) → ``q`` (batch, d)."""
        h = self._words(input_ids, attention_mask)
        if self.chunk is None:
            return h
        out, _ = self.chunk(h.unsqueeze(1))  # one chunk
        any_token = attention_mask.to(torch.bool).any(dim=1, keepdim=True).to(h.dtype)
        return out[:, 0] * any_token

    def answer_features(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Answers → ``e`` (batch, d or 2d): (batch, seq), or (batch, chunks, tokens) for HRDE."""
        if self.chunk is None:
            x = self._words(input_ids, attention_mask)
        else:
            b, c, t = input_ids.shape
            h = self._words(input_ids.reshape(b * c, t), attention_mask.reshape(b * c, t)).reshape(b, c, self.dim)
            chunk_mask = attention_mask.to(torch.bool).any(dim=2)
            out, _ = self.chunk(h)
            x = last_state(out, chunk_mask)
        if self.memory is None:
            return x
        p = torch.softmax(x @ self.memory.t(), dim=-1)  # (batch, K)
        return torch.cat([x, p @ self.memory], dim=-1)

    def encode_answer(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Answers → ``c = M e`` (batch, d), the vectors the index stores."""
        return self.answer_features(input_ids, attention_mask) @ self.M.t()

    def encode_rows(self, table: Any, rows: np.ndarray, device: torch.device, *, chunk: int = 64) -> Tensor:
        """Vectors of ``table`` rows (a ``TextTable``): questions → ``q``, answers → ``M e``.

        Rows are grouped by role and by length (less padding), encoded ``chunk`` at a time,
        and returned in ``rows``' order; gradients flow when enabled.
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = torch.zeros(len(rows), self.dim, device=device)
        answer = table.is_answer(rows)
        table._pack()
        lengths = table._lengths[rows]
        parts: list[tuple[np.ndarray, Tensor]] = []
        for role_is_answer in (False, True):
            where = np.flatnonzero(answer == role_is_answer)
            where = where[np.argsort(lengths[where], kind="stable")]
            for start in range(0, len(where), chunk):
                sel = where[start : start + chunk]
                flat, offsets = table.gather(rows[sel])
                ends = np.append(offsets[1:], len(flat))
                texts = [flat[s:e].tolist() for s, e in zip(offsets, ends, strict=True)]
                if role_is_answer and self.hierarchical:
                    assert self.chunking is not None, "an HRDE model needs its chunking settings"
                    ids_np, mask_np = self.chunking.pad(texts)
                else:
                    width = max([1, *(len(t) for t in texts)])
                    ids_np = np.zeros((len(texts), width), np.int64)
                    mask_np = np.zeros_like(ids_np)
                    for i, t in enumerate(texts):
                        ids_np[i, : len(t)], mask_np[i, : len(t)] = t, 1
                ids, mask = torch.from_numpy(ids_np).to(device), torch.from_numpy(mask_np).to(device)
                v = self.encode_answer(ids, mask) if role_is_answer else self.encode_question(ids, mask)
                parts.append((sel, v))
        if not parts:
            return out
        index = torch.from_numpy(np.concatenate([p[0] for p in parts])).to(device)
        return out.index_copy(0, index, torch.cat([p[1] for p in parts]))

    # -- description ----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Manifest description of the network.

        Example
        -------
        >>> RecurrentQA("rde-ltc", 5, hidden=3, embed_dim=2, topics=4).describe()["topics"]
        4
        """
        out: dict[str, Any] = {
            "model": self.kind,
            "network": "GRU (shared by questions and answers), last real state",
            "hidden": self.dim,
            "embedding_width": int(self.embedding.shape[1]),
            "hierarchical": self.hierarchical,
            "topics": self.topics,
        }
        if self.hierarchical:
            out["levels"] = "word-level GRU per chunk, chunk-level GRU over chunks; a question is one chunk"
        if self.ltc:
            out["ltc"] = "answer side: e = [x; sum_k softmax(x.m_k) m_k]"
        return out

    def score_definition(self) -> dict[str, Any]:
        return {
            "formula": "sigmoid(q . c + b), c = M e_a (folded into the answer encoder)",
            "higher_is_better": True,
            "distance": "-q . c",
            "parameters": {"b": self.bias},
        }

    def parameter_counts(self) -> dict[str, int]:
        """Trainable and total parameters (the embedding table counted apart)."""
        emb = int(self.embedding.numel())
        total = sum(int(p.numel()) for p in self.parameters())
        trainable = sum(int(p.numel()) for p in self.parameters() if p.requires_grad)
        return {"total": total, "trainable": trainable, "embedding": emb, "network": total - emb}


def build_recurrent_model(
    kind: str,
    tokenizer: Tokenizer,
    *,
    hidden: int = 200,
    embeddings: np.ndarray | None = None,
    train_embeddings: bool | None = None,
    embed_dim: int = 300,
    topics: int = 3,
    chunking: str = "sentences",
    max_chunks: int = 8,
    max_chunk_tokens: int = 32,
) -> RecurrentQA:
    """A :class:`RecurrentQA` over ``tokenizer``'s vocabulary (chunking resolved against it).

    Example
    -------
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "a", "."], kind="word")
    >>> build_recurrent_model("hrde", tok, hidden=3, embed_dim=2).chunking.ends
    frozenset({3})
    """
    chunker = Chunking.for_tokenizer(
        tokenizer, method=chunking, max_chunks=max_chunks, max_chunk_tokens=max_chunk_tokens
    )
    return RecurrentQA(
        kind,
        len(tokenizer.vocab),
        hidden=hidden,
        embeddings=embeddings,
        train_embeddings=train_embeddings,
        embed_dim=embed_dim,
        topics=topics,
        chunking=chunker,
    )


class QuestionEncoder(nn.Module):
    """Export form of the question side: ``(input_ids, attention_mask) (batch, seq) → q``."""

    def __init__(self, model: RecurrentQA) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model.encode_question(input_ids, attention_mask)


class AnswerEncoder(nn.Module):
    """Export form of the answer side: ``(input_ids, attention_mask) → M e`` ((batch, chunks, tokens) for HRDE)."""

    def __init__(self, model: RecurrentQA) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model.encode_answer(input_ids, attention_mask)


class BilinearScorer(nn.Module):
    """Export form of the scorer: :func:`qaindex.geometry.bilinear.bilinear_score` with ``b`` frozen in.

    Example
    -------
    >>> s, d = BilinearScorer(0.0)(torch.ones(1, 2), torch.ones(1, 3, 2))
    >>> tuple(s.shape), d[0, 0].item()
    ((1, 3), -2.0)
    """

    def __init__(self, bias: float) -> None:
        super().__init__()
        self.bias = float(bias)

    def forward(self, query: Tensor, candidates: Tensor) -> tuple[Tensor, Tensor]:
        score, distance = bilinear.bilinear_score(query, candidates, self.bias)
        return score, distance
