"""Export a local sentence-transformers model directory as a qaindex model (ONNX, cosine).

:func:`export_sentence_transformer` reads a sentence-transformers directory (``modules.json``
with a ``Transformer``, a ``Pooling`` and optionally a ``Normalize`` module, a BERT-style
uncased WordPiece tokenizer (BERT's or MPNet's, which is the same WordPiece with ``<s>``/``</s>``
around the text); for example all-MiniLM-L6-v2 or all-mpnet-base-v2 of the offline packages,
:mod:`qaindex_export.embeddings.packaged_models`) and writes,
through :func:`qaindex.model.write_model`:

- ``encoder.onnx``: ``input_ids``, ``attention_mask`` (int64, batch × seq) → ``vectors``
  (float32, batch × dim): the transformer, the model's pooling (mean, CLS, max or
  mean-sqrt-len, as in its ``1_Pooling/config.json``) and the L2 normalisation when
  ``modules.json`` has it. ``token_type_ids`` are zeros (one sequence), as
  sentence-transformers feeds them, for the models whose tokenizer makes them (BERT; not MPNet).
  A model that numbers positions from the padding (MPNet, RoBERTa) gets its position ids from
  ``input_ids`` inside the graph, so the runtime pads with the tokenizer's padding token.
- ``scorer.onnx``: cosine similarity (``score = cos``, ``distance = 1 - cos``).
- ``vocab.txt`` and the manifest: geometry ``cosine``, the tokenizer with ``[CLS]``/``[SEP]``
  (:class:`qaindex.text.tokenizer.Tokenizer` reproduces HuggingFace's uncased BERT tokenizer),
  ``max_tokens`` = the model's ``max_seq_length`` for both roles, and the parity figures.

Parity, checked before anything is written (:class:`~.onnx_export.ExportError`
otherwise): qaindex's token ids equal the HuggingFace tokenizer's on varied texts (accents,
CJK, emoji, control characters, texts past ``max_seq_length``); the ONNX encoder equals the
torch module on random ids of varied batch sizes and lengths with padding; and the written
model, loaded with :class:`qaindex.Model`, gives the vectors of ``SentenceTransformer.encode``
(cosine of each pair within ``tolerance`` of 1).

Anything else (another tokenizer family, a cased vocabulary, ``Dense`` or other modules, a
pooling mode qaindex does not reproduce, weights other than ``model.safetensors``: a pickle is
never loaded) is refused with a message that names the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qaindex.errors import MissingDependencyError, ModelFormatError
from qaindex.model import write_model
from qaindex.text.tokenizer import Tokenizer

from .export_forms import CosineScorer
from .onnx_graph import ExportError, export_scorer, quantize_int8
from .onnx_graph import export_graph as _export
from .onnx_graph import session as _session

__all__ = ["PARITY_TEXTS", "SentenceTransformerSource", "export_sentence_transformer", "read_source"]

_POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens")
# sentence-transformers' older Pooling config: one bool per mode
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# MPNet's tokenizer is BERT's uncased WordPiece with other special tokens (<s> text </s>)
_BERT_TOKENIZERS = ("BertTokenizer", "BertTokenizerFast", "MPNetTokenizer", "MPNetTokenizerFast")

#: Texts whose token ids and vectors the export compares with sentence-transformers.
PARITY_TEXTS = (
    "How do I reset my password?",
    "Refunds are paid within 14 days of a cancelled order.",
    "Héllo naïve café — ÀÉÎÕÜ, Straße and ΣΑΣ",
    "中文 日本語 한국어 mixed with English 🙂 and symbols ©®™ ±×÷",
    "tabs\tand\nnewlines\r\nand a control\x0bcharacter\x00here",
    "don't stop-believing: 3.14159 (approximately), e.g. U.S.A. #1 @home $5 50% a&b",
    "a",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic",
    " ".join(["the quick brown fox jumps over the lazy dog"] * 80),  # past max_seq_length
    "x" * 150 + " word",  # a word longer than max_chars_per_word
)

#: The smallest cosine an int8 encoder's vectors must keep with sentence-transformers' on
#: :data:`PARITY_TEXTS` (all-MiniLM-L6-v2 keeps about 0.99; its retrieval quality on the user
#: corpora: docs/sentence-transformers.md).
QUANTIZED_MIN_COSINE = 0.98


@dataclass(frozen=True)
class SentenceTransformerSource:
    """What qaindex needs from a sentence-transformers directory (checked by :func:`read_source`).

    Attributes
    ----------
    directory : Path
    max_seq_length : int
        Tokens per text, ``[CLS]`` and ``[SEP]`` included.
    pooling : str
        One of ``cls``, ``max``, ``mean``, ``mean_sqrt_len_tokens``.
    normalize : bool
        Whether ``modules.json`` ends with a ``Normalize`` module.
    dimension : int
    tokenizer : Tokenizer
    """

    directory: Path
    max_seq_length: int
    pooling: str
    normalize: bool
    dimension: int
    tokenizer: Tokenizer


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{path}: missing; is {path.parent} a sentence-transformers model directory?") from None
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path}: cannot be read as JSON ({exc})") from None


def read_source(directory: str | os.PathLike[str]) -> SentenceTransformerSource:
    """Check a sentence-transformers directory and read its settings and tokenizer.

    Raises
    ------
    ExportError
        The directory is not a sentence-transformers model, or uses modules or a tokenizer
        qaindex cannot reproduce (the message names the file and the setting).

    Example
    -------
    >>> from qaindex_export.embeddings.spec import minilm_dir
    >>> read_source(minilm_dir()).max_seq_length  # doctest: +SKIP
    256
    """
    root = Path(directory)
    if not root.is_dir():
        raise ExportError(f"{root}: no such directory; give a local sentence-transformers model directory")
    modules = _json(root / "modules.json")
    types = [str(m.get("type")) for m in modules] if isinstance(modules, list) else []
    # the class name (sentence-transformers moved the modules between versions)
    names = [t.rsplit(".", 1)[-1] if t.startswith("sentence_transformers.") else t for t in types]
    if names[:2] != ["Transformer", "Pooling"] or any(n != "Normalize" for n in names[2:]) or len(names) > 3:
        raise ExportError(
            f"{root / 'modules.json'}: modules are {types}; qaindex exports Transformer, Pooling and "
            "optionally Normalize (in that order)"
        )
    normalize = len(names) == 3
    transformer_dir = root / (modules[0].get("path") or "")
    pooling_dir = root / modules[1].get("path", "1_Pooling")
    st_config = _json(transformer_dir / "sentence_bert_config.json")
    max_seq_length = st_config.get("max_seq_length")
    if max_seq_length is None:  # newer sentence-transformers keep it in the tokenizer's config
        max_seq_length = _json(transformer_dir / "tokenizer_config.json").get("model_max_length")
    if not isinstance(max_seq_length, int) or max_seq_length < 3:
        raise ExportError(f"{transformer_dir / 'sentence_bert_config.json'}: max_seq_length is {max_seq_length!r}")
    pooling_config = _json(pooling_dir / "config.json")
    mode = pooling_config.get("pooling_mode")
    if mode is None:
        modes = [new for old, new in _LEGACY_POOLING.items() if pooling_config.get(old)]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode)
    if len(modes) != 1 or modes[0] not in _POOLING_MODES:
        raise ExportError(
            f"{pooling_dir / 'config.json'}: pooling {modes}; qaindex exports exactly one of "
            f"{', '.join(_POOLING_MODES)}"
        )
    dimension = pooling_config.get("embedding_dimension", pooling_config.get("word_embedding_dimension"))
    if not isinstance(dimension, int) or dimension < 1:
        raise ExportError(f"{pooling_dir / 'config.json'}: the embedding dimension is {dimension!r}")
    prompts_path = root / "config_sentence_transformers.json"
    prompts = _json(prompts_path).get("prompts") if prompts_path.is_file() else None
    if isinstance(prompts, dict) and any(prompts.values()):
        raise ExportError(
            f"{prompts_path}: the model prepends prompts {sorted(k for k, v in prompts.items() if v)}; "
            "not supported by qaindex"
        )
    _check_weights(transformer_dir)
    tokenizer = _read_tokenizer(transformer_dir, st_config)
    return SentenceTransformerSource(root, max_seq_length, modes[0], normalize, dimension, tokenizer)


_SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def _check_weights(directory: Path) -> None:
    """The transformer's weights must be safetensors: loading a pickle (``pytorch_model.bin``)
    can run any code it holds, so a directory with only pickled weights is refused."""
    if any((directory / name).is_file() for name in _SAFE_WEIGHTS):
        return
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    if pickles:
        raise ModelFormatError(
            f"{directory / pickles[0]}: the weights are a pickle, refused (loading a pickle can run any code "
            "in it); convert them to model.safetensors"
        )
    raise ModelFormatError(f"{directory}: no model.safetensors; qaindex exports safetensors weights only")


def _read_tokenizer(directory: Path, st_config: dict[str, Any]) -> Tokenizer:
    """qaindex's WordPiece tokenizer for a BERT-style uncased HuggingFace tokenizer, or an error."""
    config_path = directory / "tokenizer_config.json"
    config = _json(config_path)
    klass = config.get("tokenizer_class")
    if klass not in _BERT_TOKENIZERS:
        raise ExportError(
            f"{config_path}: tokenizer_class is {klass!r}; qaindex reproduces BERT's WordPiece tokenizer "
            f"({' or '.join(_BERT_TOKENIZERS)}) only, so this model cannot be exported"
        )
    fast = directory / "tokenizer.json"
    spec: dict[str, Any] = _json(fast) if fast.is_file() else {}
    max_chars = 100
    if spec:
        model = spec.get("model") or {}
        normalizer = spec.get("normalizer") or {}
        if model.get("type") != "WordPiece" or normalizer.get("type") != "BertNormalizer":
            raise ExportError(
                f"{fast}: model {model.get('type')!r} with normalizer {normalizer.get('type')!r}; qaindex "
                "reproduces WordPiece with BertNormalizer only"
            )
        if (
            normalizer.get("lowercase") is False
            or normalizer.get("strip_accents") is False
            or normalizer.get("handle_chinese_chars") is False
            or model.get("continuing_subword_prefix", "##") != "##"
        ):
            raise ExportError(
                f"{fast}: a cased or otherwise customised BERT normalizer / WordPiece; qaindex reproduces "
                "the uncased BERT defaults only"
            )
        max_chars = int(model.get("max_input_chars_per_word", 100))
    if st_config.get("do_lower_case"):
        raise ExportError(
            f"{directory / 'sentence_bert_config.json'}: do_lower_case is true (sentence-transformers lowercases "
            "the text itself); not supported by qaindex"
        )
    lower = config.get("do_lower_case", True)
    if not lower:
        raise ExportError(
            f"{config_path}: do_lower_case is {lower!r}; qaindex reproduces uncased BERT tokenizers only "
            "(a cased vocabulary is not supported)"
        )
    if config.get("strip_accents") is False or config.get("tokenize_chinese_chars") is False:
        raise ExportError(
            f"{config_path}: strip_accents / tokenize_chinese_chars are switched off; qaindex reproduces "
            "the uncased BERT defaults only"
        )
    if config.get("do_basic_tokenize") is False or config.get("never_split"):
        raise ExportError(f"{config_path}: do_basic_tokenize off or never_split set; not supported by qaindex")
    vocab = _read_vocab(directory, spec)
    return Tokenizer(
        vocab,
        kind="wordpiece",
        lowercase=True,
        strip_accents=True,
        unk_token=config.get("unk_token", "[UNK]"),
        pad_token=config.get("pad_token", "[PAD]"),
        cls_token=config.get("cls_token", "[CLS]"),
        sep_token=config.get("sep_token", "[SEP]"),
        max_chars_per_word=max_chars,
    )


def _read_vocab(directory: Path, spec: dict[str, Any]) -> list[str]:
    """The WordPiece vocabulary: ``vocab.txt``, else the ``vocab`` of ``tokenizer.json``."""
    vocab_path = directory / "vocab.txt"
    if vocab_path.is_file():
        vocab = vocab_path.read_text(encoding="utf-8").split("\n")
        if vocab and vocab[-1] == "":
            vocab.pop()
        return vocab
    table = (spec.get("model") or {}).get("vocab")
    if not isinstance(table, dict) or sorted(table.values()) != list(range(len(table))):
        raise ExportError(
            f"{directory}: no vocab.txt, and tokenizer.json has no WordPiece vocabulary with ids 0..n-1; "
            "the vocabulary is needed"
        )
    return [token for token, _ in sorted(table.items(), key=lambda item: item[1])]


class _SentenceEncoder(torch.nn.Module):
    """Transformer, pooling and normalisation of a sentence-transformers model: ids → vectors."""

    def __init__(self, transformer: torch.nn.Module, pooling: str, normalize: bool, token_types: bool = True) -> None:
        super().__init__()
        self.transformer = transformer
        self.pooling = pooling
        self.normalize = normalize
        self.token_types = token_types

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.token_types:
            out = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
            )
        else:
            out = self.transformer(input_ids=input_ids, attention_mask=attention_mask)
        tokens = out[0]
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        if self.pooling == "cls":
            pooled = tokens[:, 0]
        elif self.pooling == "max":
            pooled = torch.where(mask > 0, tokens, torch.full_like(tokens, -1e9)).max(dim=1).values
        else:
            summed = (tokens * mask).sum(dim=1)
            count = mask.sum(dim=1).clamp(min=1e-9)
            pooled = summed / (count if self.pooling == "mean" else count.sqrt())
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
        return pooled


def _load_st(directory: Path) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingDependencyError(
            "exporting a sentence-transformers model needs the package sentence-transformers "
            "(pip install 'qaindex[train,bench]')"
        ) from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformer(os.fspath(directory), device="cpu", local_files_only=True)


def _export_encoder(module: torch.nn.Module, vocab_size: int) -> bytes:
    from torch.export import Dim

    batch, seq = Dim("batch"), Dim("seq", max=100_000)
    ids = torch.tensor([[101, min(2000, vocab_size - 1), 102, 0], [101, 102, 0, 0]], dtype=torch.int64)
    ids = ids.clamp(max=vocab_size - 1)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.int64)
    return _export(
        module,
        (ids, mask),
        ["input_ids", "attention_mask"],
        ["vectors"],
        {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        {"input_ids": 2, "attention_mask": 2},
    )


def _check_graph(
    module: torch.nn.Module, graph: bytes, vocab_size: int, pad_id: int, max_len: int, tolerance: float
) -> float:
    """Largest |onnx - torch| of the encoder on random ids (batch 1-5, lengths 1-max_len, padded
    with ``pad_id`` as the runtime pads)."""
    session = _session(graph)
    rng = np.random.default_rng(0)
    worst = 0.0
    with torch.no_grad():
        for batch, length in ((1, 1), (2, 3), (5, 17), (3, min(max_len, 64)), (2, max_len)):
            ids = rng.integers(min(1000, vocab_size // 2), vocab_size, size=(batch, length)).astype(np.int64)
            lengths = rng.integers(1, length + 1, size=batch)
            lengths[0] = length
            mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
            ids = np.where(mask == 1, ids, pad_id)
            (got,) = session.run(["vectors"], {"input_ids": ids, "attention_mask": mask})
            want = module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
            diff = float(np.abs(got.astype(np.float64) - want).max(initial=0.0))
            worst = max(worst, diff)
            if diff > tolerance:
                raise ExportError(
                    f"parity check failed: the ONNX encoder differs from torch by {diff:.3g} "
                    f"(batch {batch}, length {length}; tolerance {tolerance:g}); the export is not faithful"
                )
    return worst


def _check_tokens(st: Any, tokenizer: Tokenizer, max_len: int, texts: tuple[str, ...]) -> None:
    want = st.tokenizer(list(texts), truncation=True, max_length=max_len)["input_ids"]
    for text, ids in zip(texts, want, strict=True):
        got = tokenizer.encode(text, max_len)
        if got != list(ids):
            at = next((i for i, (a, b) in enumerate(zip(got, ids, strict=False)) if a != b), min(len(got), len(ids)))
            raise ExportError(
                f"qaindex's tokenizer gives other ids than the model's HuggingFace tokenizer for {text[:40]!r} "
                f"(first difference at token {at}); this tokenizer is not supported"
            )


def export_sentence_transformer(
    source: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    name: str | None = None,
    tolerance: float = 1e-4,
    texts: tuple[str, ...] = PARITY_TEXTS,
    progress: Callable[[str], None] | None = None,
    calibrate: bool = True,
    quantize: str | None = None,
) -> Path:
    """Write a sentence-transformers model directory as a qaindex model directory.

    The written model gets its own fusion rule and calibration
    (:func:`qaindex.eval.fusion_fit.fit_written_model`): both fitted on the example FAQ
    shipped with qaindex (labelled questions the source model never trained on), the
    calibration with the built-in off-topic questions' ``fit`` split as not relevant.

    Parameters
    ----------
    source : path-like
        A local sentence-transformers model directory (nothing is downloaded).
    directory : path-like
        The qaindex model directory to write (replaced atomically if it is one already).
    name : str, optional
        Model name (default: the source directory's name).
    tolerance : float, keyword-only
        Largest allowed difference between onnxruntime and torch (encoder outputs), and
        between 1 and the cosine of the vectors of qaindex and sentence-transformers.
    texts : tuple of str, keyword-only
        Texts of the token-id and end-to-end checks (default :data:`PARITY_TEXTS`).
    progress : callable, keyword-only, optional
        Called with a short line as each step starts (loading, exporting, each parity check,
        writing): ``qaindex export-model`` prints them on stderr.
    calibrate : bool, keyword-only
        Fit the fusion and the calibration (default); False: leave the manifest without them.
    quantize : {None, "int8"}, keyword-only
        ``"int8"``: store the encoder's weights as int8 (:func:`~.onnx_graph.quantize_int8`),
        about 4x smaller and 2x faster per question on a CPU; its vectors must then keep a
        cosine of at least :data:`QUANTIZED_MIN_COSINE` with sentence-transformers' (instead
        of ``1 - tolerance``), and the manifest records the smallest one measured.

    Returns
    -------
    Path

    Raises
    ------
    ExportError
        The source is not supported, or a parity check failed (nothing is written).

    Example
    -------
    >>> from qaindex_export.embeddings.spec import minilm_dir
    >>> export_sentence_transformer(minilm_dir(), "minilm")  # doctest: +SKIP
    PosixPath('minilm')
    """
    if quantize not in (None, "int8"):  # before any work
        raise ExportError(f'quantize must be None or "int8", got {quantize!r}')
    say = progress if progress is not None else (lambda line: None)
    src = read_source(source)
    say(f"loading {src.directory} with sentence-transformers")
    st = _load_st(src.directory)
    if int(st.max_seq_length) != src.max_seq_length:
        raise ExportError(
            f"{src.directory}: sentence-transformers loads it with max_seq_length {st.max_seq_length}, its "
            f"files say {src.max_seq_length}; not supported by qaindex"
        )
    transformer = st[0].auto_model.cpu().eval()
    if hasattr(transformer, "set_attn_implementation"):
        try:
            transformer.set_attn_implementation("eager")
        except (ValueError, AttributeError, TypeError, NotImplementedError):
            pass
    # sentence-transformers feeds what the tokenizer makes: token_type_ids for BERT, none for MPNet
    token_types = "token_type_ids" in getattr(st.tokenizer, "model_input_names", ("token_type_ids",))
    module = _SentenceEncoder(transformer, src.pooling, src.normalize, token_types).eval()
    vocab_size = src.tokenizer.vocab_size
    say("checking the tokenizer against sentence-transformers'")
    _check_tokens(st, src.tokenizer, src.max_seq_length, texts)
    say(f"exporting the encoder to ONNX ({sum(p.numel() for p in module.parameters()):,} parameters)")
    with torch.no_grad():
        encoder_graph = _export_encoder(module, vocab_size)
    say("checking parity: onnxruntime against torch")
    encoder_diff = _check_graph(module, encoder_graph, vocab_size, src.tokenizer.pad_id, src.max_seq_length, tolerance)
    if quantize is not None:
        say("quantizing the encoder's weights to int8")
        encoder_graph = quantize_int8(encoder_graph)
    scorer_graph = export_scorer(CosineScorer(1.0, 0.0), src.dimension)
    label = name or src.directory.name
    parameters = {"total": int(sum(p.numel() for p in module.parameters())), "trainable": 0}
    card = src.directory / "README.md"
    geometry = {"name": "cosine"}
    score = {"formula": "cos(q, a)", "higher_is_better": True, "parameters": {}}
    training = {
        "source": "sentence-transformers",
        "source_model": src.directory.name,
        "modules": ["Transformer", f"Pooling ({src.pooling})", *(["Normalize"] if src.normalize else [])],
        "max_seq_length": src.max_seq_length,
        "note": "exported, not trained by qaindex: see SOURCE_README.md for the model's own card and data",
        "torch_version": torch.__version__,
        **({"quantized": quantize} if quantize is not None else {}),
    }
    common: dict[str, Any] = {
        "name": label,
        "geometry": geometry,
        "dimension": src.dimension,
        "tokenizer": src.tokenizer,
        "max_tokens": {"question": src.max_seq_length, "answer": src.max_seq_length},
        "encoder": encoder_graph,
        "scorer": scorer_graph,
        "score": score,
        "training": training,
        "parameters": parameters,
    }
    say("checking parity: qaindex's vectors against sentence-transformers'")
    with tempfile.TemporaryDirectory() as tmp:
        trial = write_model(Path(tmp) / "model", **common)
        worst_cos = _check_end_to_end(
            st, trial, texts, tolerance if quantize is None else 1.0 - QUANTIZED_MIN_COSINE, quantize
        )
    say(f"writing {directory}")
    metrics: dict[str, Any] = {
        "parity": {
            "encoder_max_abs_diff": encoder_diff,
            "sentence_transformers_min_cosine": worst_cos,
            "token_ids": "identical",
            "texts": len(texts),
        }
    }
    if quantize is not None:  # the float graph matched torch to `tolerance`; the int8 one is measured
        metrics["parity"]["encoder_max_abs_diff_before_quantization"] = metrics["parity"].pop("encoder_max_abs_diff")
        metrics["quantization"] = {
            "weights": "int8, one scale per output channel",
            "activations": "int8, quantized at run time",
            "tool": "onnxruntime.quantization.quantize_dynamic",
            "sentence_transformers_min_cosine": worst_cos,
        }
    path = write_model(
        directory, **common, metrics=metrics, extra_files={"SOURCE_README.md": card} if card.is_file() else None
    )
    if calibrate:
        say("fitting its fusion and calibrating its scores on the example FAQ")
        from qaindex.eval.fusion_fit import fit_written_model
        from qaindex.eval.offtopic import BUILTIN_OFFTOPIC, read_offtopic

        fit_written_model(
            path,
            calibration_source="example FAQ (qaindex/eval/data/faq.jsonl)",
            offtopic=read_offtopic(BUILTIN_OFFTOPIC, split="fit"),
            offtopic_source="built-in off-topic questions (fit split)",
        )
    return path


def _check_end_to_end(
    st: Any, model_dir: Path, texts: tuple[str, ...], tolerance: float, quantize: str | None = None
) -> float:
    """Smallest cosine between qaindex's and sentence-transformers' vectors of ``texts``."""
    from qaindex.model import Model

    model = Model.load(model_dir, device="cpu")
    worst = 1.0
    for role in ("question", "answer"):
        got = model.encode(list(texts), role=role).astype(np.float64)
        want = np.asarray(st.encode(list(texts), batch_size=8, convert_to_numpy=True), dtype=np.float64)
        cos = np.sum(got * want, axis=1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1), 1e-30)
        worst = min(worst, float(cos.min()))
    if 1.0 - worst > tolerance:
        if quantize is not None:
            raise ExportError(
                f"the {quantize} encoder's vectors drift too far from sentence-transformers' (smallest cosine "
                f"{worst:.6f}, at least {1.0 - tolerance:g} needed); export this model without --quantize"
            )
        raise ExportError(
            f"parity check failed: qaindex's vectors differ from sentence-transformers' (smallest cosine "
            f"{worst:.6f}, tolerance {tolerance:g}); the export is not faithful"
        )
    return worst
