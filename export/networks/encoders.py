"""QA-CNN and QA-biLSTM (dos Santos et al., 2016, section 2) as dual encoders.

Both networks encode a question and an answer independently with shared weights and score
the pair by cosine similarity::

    z_t    = E[token_t]                         word embeddings (frozen pretrained, or trainable)
    QA-CNN:    h_t = W_1 [z_{t-l}; ...; z_{t+r}] + b_1     context window of k words, c filters
    QA-biLSTM: h_t = [LSTM→(z)_t ; LSTM←(z)_t]              c = 2H
    r      = tanh(max_t h_t)                    column-wise max-pooling over the real tokens
    score  = cos(r_q, r_a)                      distance 1 - cos

They are :class:`~.models.CosineQA` models whose encoder is a sequence network
instead of a bag of words, with the cosine's scale fixed at ``w_f = 1``, ``b_f = 0`` (the
paper scores by the plain cosine). Trained with the pairwise hinge loss, they serve through the
runtime's ``cosine`` geometry unchanged (the coarse index is normalised inner product).

Masking is done by hand, never with ``pack_padded_sequence`` (which the dynamo ONNX exporter
cannot export): padded embeddings are zeroed, so the convolution sees the zero padding it would
see on the unpadded text; the backward LSTM runs over each text reversed within its own length
(a gather), so right padding never reaches a real position; the max-pool ignores padded
positions. An empty text encodes to the zero vector (cosine 0 with everything).

Example
-------
>>> model = build_sequence_model("qa-cnn", 10, dim=6, embed_dim=4, window=3)
>>> v = model(torch.tensor([[2, 3, 0], [4, 0, 0]]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
>>> tuple(v.shape), bool((v.abs() < 1).all())
((2, 6), True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .models import BallMap, CosineQA, embedding_parameter

__all__ = [
    "SEQUENCE_MODELS",
    "BiLSTMEncoder",
    "CNNEncoder",
    "SequenceEncoder",
    "SequenceQA",
    "build_sequence_model",
    "pad_ragged",
]

SEQUENCE_MODELS = ("qa-cnn", "qa-bilstm")
DEFAULT_NEGATIVE_POOL = 50  # the paper: highest-scoring of 50 sampled negatives


def pad_ragged(flat_ids: Tensor, offsets: Tensor) -> tuple[Tensor, Tensor]:
    """Ragged texts (concatenated ids, start offsets) → right-padded ids and mask (batch, seq).

    ``seq`` is the longest text's length, at least 1; padding ids are 0.

    Example
    -------
    >>> ids, mask = pad_ragged(torch.tensor([5, 6, 7]), torch.tensor([0, 2, 3]))
    >>> ids.tolist(), mask.tolist()
    ([[5, 6], [7, 0], [0, 0]], [[1, 1], [1, 0], [0, 0]])
    """
    total = flat_ids.numel()
    ends = torch.cat([offsets[1:], offsets.new_tensor([total])])
    lengths = ends - offsets
    seq = max(1, int(lengths.max())) if lengths.numel() else 1
    steps = torch.arange(seq, device=flat_ids.device)
    mask = steps[None, :] < lengths[:, None]
    if total == 0:
        return torch.zeros(mask.shape, dtype=torch.int64, device=flat_ids.device), mask.long()
    position = (offsets[:, None] + steps[None, :]).clamp(max=total - 1)
    ids = torch.where(mask, flat_ids[position], torch.zeros_like(position))
    return ids, mask.long()


class SequenceEncoder(nn.Module):
    """Shared part of the sequence encoders: embeddings, masked max-pooling + tanh, ragged input.

    Subclasses define :meth:`features` ((batch, seq, e) masked embeddings → (batch, seq, dim)).

    Parameters
    ----------
    vocab_size : int
    dim : int
        Output size ``c`` (filters of QA-CNN, ``2H`` of QA-biLSTM).
    embeddings : numpy.ndarray (vocab_size, e), optional
        Pretrained embeddings; None initialises ``N(0, 1/e)`` rows of width ``embed_dim``.
    train_embeddings : bool, optional
        Update the embeddings (default: only when none are given).
    embed_dim : int
        Width of random embeddings.
    """

    padded = True  # the training loop batches texts of similar length together

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        embeddings: np.ndarray | None = None,
        train_embeddings: bool | None = None,
        embed_dim: int = 300,
    ) -> None:
        super().__init__()
        self.embedding = embedding_parameter(vocab_size, embeddings, train_embeddings, embed_dim)
        self.dim = int(dim)

    @property
    def width(self) -> int:
        """Output columns (``dim``)."""
        return self.dim

    @property
    def embed_width(self) -> int:
        return int(self.embedding.shape[1])

    def features(self, z: Tensor, mask: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Padded ids (batch, seq) → ``tanh(max over real tokens of h_t)`` (batch, dim)."""
        mask = attention_mask.to(torch.bool)
        z = F.embedding(input_ids, self.embedding) * mask.unsqueeze(-1).to(torch.float32)
        h = self.features(z, mask)
        h = torch.where(mask.unsqueeze(-1), h, torch.full_like(h, -1e9))
        pooled = torch.tanh(h.max(dim=1).values)
        any_token = mask.any(dim=1, keepdim=True).to(pooled.dtype)
        return pooled * any_token  # an empty text is the zero vector

    def bags(self, flat_ids: Tensor, offsets: Tensor) -> Tensor:
        """Encode ragged texts (the training loop's input form): pads them, then :meth:`forward`."""
        ids, mask = pad_ragged(flat_ids, offsets)
        return self(ids, mask)

    def spec(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


class CNNEncoder(SequenceEncoder):
    """QA-CNN's encoder: convolution over context windows of ``window`` words, ``dim`` filters.

    The window around word ``t`` covers ``(window - 1) // 2`` words before it and the rest
    after it (zero embeddings beyond the text), so there is one column per word.

    Example
    -------
    >>> enc = CNNEncoder(10, 5, embed_dim=4, window=4)
    >>> enc(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 1, 1]])).shape
    torch.Size([1, 5])
    """

    def __init__(self, vocab_size: int, dim: int, *, window: int = 4, **kwargs: Any) -> None:
        super().__init__(vocab_size, dim, **kwargs)
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.window = int(window)
        self.conv = nn.Conv1d(self.embed_width, dim, kernel_size=self.window)

    def features(self, z: Tensor, mask: Tensor) -> Tensor:
        before = (self.window - 1) // 2
        x = F.pad(z.transpose(1, 2), (before, self.window - 1 - before))
        return self.conv(x).transpose(1, 2)

    def spec(self) -> dict[str, Any]:
        return {"network": "cnn", "filters": self.dim, "window": self.window}


class BiLSTMEncoder(SequenceEncoder):
    """QA-biLSTM's encoder: forward and backward LSTMs of ``dim // 2`` units each.

    The backward LSTM reads each text reversed within its own length (index gather), so its
    output at a real token never depends on the padding.

    Example
    -------
    >>> enc = BiLSTMEncoder(10, 6, embed_dim=4)
    >>> a = enc(torch.tensor([[1, 2]]), torch.tensor([[1, 1]]))
    >>> b = enc(torch.tensor([[1, 2, 0, 0]]), torch.tensor([[1, 1, 0, 0]]))
    >>> bool(torch.allclose(a, b, atol=1e-6))
    True
    """

    def __init__(self, vocab_size: int, dim: int, **kwargs: Any) -> None:
        super().__init__(vocab_size, dim, **kwargs)
        if dim % 2 or dim < 2:
            raise ValueError(f"dim of a biLSTM is 2H and must be even, got {dim}")
        hidden = dim // 2
        self.forward_lstm = nn.LSTM(self.embed_width, hidden, batch_first=True)
        self.backward_lstm = nn.LSTM(self.embed_width, hidden, batch_first=True)

    def features(self, z: Tensor, mask: Tensor) -> Tensor:
        lengths = mask.to(torch.int64).sum(dim=1, keepdim=True)  # (batch, 1)
        steps = torch.arange(z.shape[1], device=z.device).unsqueeze(0)  # (1, seq)
        reverse = torch.where(steps < lengths, lengths - 1 - steps, steps)  # an involution
        index = reverse.unsqueeze(-1).expand(-1, -1, z.shape[2])
        fwd, _ = self.forward_lstm(z)
        bwd_reversed, _ = self.backward_lstm(torch.gather(z, 1, index))
        bwd = torch.gather(bwd_reversed, 1, reverse.unsqueeze(-1).expand(-1, -1, bwd_reversed.shape[2]))
        return torch.cat([fwd, bwd], dim=-1)

    def spec(self) -> dict[str, Any]:
        return {"network": "bilstm", "hidden": self.dim // 2, "directions": 2}


class SequenceQA(CosineQA):
    """QA-CNN / QA-biLSTM: a sequence encoder and the plain cosine (``w_f = 1``, ``b_f = 0`` frozen).

    Example
    -------
    >>> model = build_sequence_model("qa-bilstm", 10, dim=4, embed_dim=3)
    >>> model.kind, model.geometry_info()
    ('qa-bilstm', {'name': 'cosine'})
    """

    encoder: SequenceEncoder  # type: ignore[assignment]

    def __init__(self, encoder: SequenceEncoder, kind: str) -> None:
        super().__init__(encoder, BallMap("none"))  # type: ignore[arg-type]
        self.kind = kind
        with torch.no_grad():  # softplus(w_raw) = 1 within float32 rounding
            self.w_raw.fill_(math.log(math.expm1(1.0)))
        self.w_raw.requires_grad_(False)
        self.b_f.requires_grad_(False)

    def score_definition(self) -> dict[str, Any]:
        return {
            "formula": "cos(r_q, r_a)",
            "higher_is_better": True,
            "parameters": {"w_f": self.w_f.item(), "b_f": self.b_f.item()},
        }

    def describe(self) -> dict[str, Any]:
        """Manifest description of the encoder network."""
        return {
            "model": self.kind,
            **self.encoder.spec(),
            "embedding_width": self.encoder.embed_width,
            "pooling": "tanh(column-wise max over real tokens)",
        }


def build_sequence_model(
    kind: str,
    vocab_size: int,
    *,
    dim: int = 300,
    embeddings: np.ndarray | None = None,
    train_embeddings: bool | None = None,
    embed_dim: int = 300,
    window: int = 4,
) -> SequenceQA:
    """Create a QA-CNN (``dim`` filters, context ``window``) or QA-biLSTM (``dim // 2`` units per direction).

    Example
    -------
    >>> build_sequence_model("qa-cnn", 10, dim=4, embed_dim=3).describe()["window"]
    4
    """
    common: dict[str, Any] = {"embeddings": embeddings, "train_embeddings": train_embeddings, "embed_dim": embed_dim}
    encoder: SequenceEncoder
    if kind == "qa-cnn":
        encoder = CNNEncoder(vocab_size, dim, window=window, **common)
    elif kind == "qa-bilstm":
        encoder = BiLSTMEncoder(vocab_size, dim, **common)
    else:
        raise ValueError(f"unknown sequence model {kind!r}; choose one of {SEQUENCE_MODELS}")
    return SequenceQA(encoder, kind)


def export_module(model: SequenceQA) -> nn.Module:
    """The encoder to export: a CPU float32 copy without gradients (the same function).

    Example
    -------
    >>> m = build_sequence_model("qa-cnn", 10, dim=4, embed_dim=3)
    >>> next(export_module(m).parameters()).requires_grad
    False
    """
    import copy

    encoder = copy.deepcopy(model.encoder).cpu().float().eval()
    return encoder.requires_grad_(False)
