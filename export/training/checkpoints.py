"""Training checkpoints: a directory of ``weights.safetensors`` + ``checkpoint.json`` (no pickle).

Written atomically (a sibling directory renamed into place); read back with every field, the
weights' SHA-256 and each tensor's name and shape checked.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from qaindex.errors import QAIndexError
from qaindex.store.atomic_files import sha256_file
from qaindex.text.tokenizer import Tokenizer

from ..config import RECURRENT_KINDS, TrainConfig
from ..networks.attentive import ATTENTIVE_MODELS
from ..networks.families import build_model, from_config
from ..networks.models import DualEncoderQA
from .result import TrainResult

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "load_checkpoint", "save_checkpoint"]


CHECKPOINT_FORMAT = "qaindex-train-checkpoint"
CHECKPOINT_VERSION = 2
_CKPT_JSON = "checkpoint.json"
_CKPT_WEIGHTS = "weights.safetensors"


def _strict_json(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and NaN/Infinity as None (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict_json(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def save_checkpoint(result: TrainResult, path: str | os.PathLike[str]) -> Path:
    """Save a trained model (best epoch) as a checkpoint directory: no pickle.

    ``path`` becomes a directory holding ``weights.safetensors`` (the model's tensors) and
    ``checkpoint.json`` (format, version, config, ball map, vocabulary, tokenizer settings,
    provenance and metrics, and the SHA-256 of the weights file). It is written to a sibling
    temporary directory and renamed into place, so an interrupted save leaves any previous
    checkpoint at ``path`` intact. NaN/Infinity metrics are stored as ``null``.

    Example
    -------
    >>> save_checkpoint(result, "hyperqa.ckpt")  # doctest: +SKIP
    PosixPath('hyperqa.ckpt')
    """
    import json
    import shutil

    from safetensors.torch import save_file

    target = Path(path)
    if target.exists() and not (target.is_dir() and (target / _CKPT_JSON).is_file()):
        raise QAIndexError(
            f"{target}: exists and is not a qaindex checkpoint directory; choose another --checkpoint path"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        tensors = {k: v.detach().cpu().contiguous().clone() for k, v in result.model.state_dict().items()}
        save_file(tensors, str(tmp / _CKPT_WEIGHTS), metadata={"format": CHECKPOINT_FORMAT})
        meta = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "weights": {"file": _CKPT_WEIGHTS, "sha256": sha256_file(tmp / _CKPT_WEIGHTS)},
            "config": result.config.to_dict(),
            "ball": result.model.ball.kind,
            "vocab": list(result.tokenizer.vocab),
            "tokenizer": result.tokenizer.config(),
            "best_epoch": result.best_epoch,
            "dev": result.dev,
            "history": result.history,
            "norms": result.norms,
            "data": result.data,
            "embeddings": result.embeddings,
            "seconds": result.seconds,
            "selection": result.selection,
            "diagnostics": result.diagnostics,
        }
        with open(tmp / _CKPT_JSON, "w", encoding="utf-8") as handle:
            json.dump(_strict_json(meta), handle, ensure_ascii=False, allow_nan=False, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not target.exists():
            os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return target


def _checkpoint_error(path: Path, what: str) -> QAIndexError:
    return QAIndexError(f"{path}: {what}; save the checkpoint again with `qaindex train --checkpoint`")


def load_checkpoint(path: str | os.PathLike[str], *, device: str = "cpu") -> TrainResult:
    """Load a checkpoint written by :func:`save_checkpoint` (the model at its best epoch).

    Validates the format, version, fields, the weights file's SHA-256 and every tensor's
    name and shape; any problem is a :class:`~qaindex.QAIndexError` naming the file.
    Nothing is unpickled: tensors come from safetensors, the rest from JSON.

    Example
    -------
    >>> result = load_checkpoint("hyperqa.ckpt")  # doctest: +SKIP
    """
    import json

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    root = Path(path)
    meta_path = root / _CKPT_JSON
    if not root.is_dir() or not meta_path.is_file():
        raise QAIndexError(
            f"{root}: not a qaindex training checkpoint (a directory with {_CKPT_JSON} and {_CKPT_WEIGHTS})"
        )
    try:
        state = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _checkpoint_error(meta_path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise _checkpoint_error(meta_path, "not a qaindex training checkpoint")
    if state.get("version") != CHECKPOINT_VERSION:
        raise _checkpoint_error(
            meta_path,
            f"checkpoint version {state.get('version')!r} is not supported (this code reads {CHECKPOINT_VERSION})",
        )
    expect = {
        "config": dict,
        "ball": str,
        "vocab": list,
        "tokenizer": dict,
        "best_epoch": int,
        "weights": dict,
        "history": list,
    }
    for key, kind in expect.items():
        if not isinstance(state.get(key), kind):
            raise _checkpoint_error(meta_path, f'field "{key}" is missing or not a {kind.__name__}')
    weights_path = root / _CKPT_WEIGHTS
    if not weights_path.is_file():
        raise _checkpoint_error(weights_path, "missing")
    if sha256_file(weights_path) != state["weights"].get("sha256"):
        raise _checkpoint_error(weights_path, "checksum does not match checkpoint.json (corrupted or replaced)")
    try:
        # checkpoints from before the ranking setting were trained with the plain distance
        config = TrainConfig.from_dict({"ranking": "distance", **state["config"]})
        tok_cfg = state["tokenizer"]
        tokenizer = Tokenizer(
            state["vocab"],
            kind=tok_cfg["kind"],
            lowercase=tok_cfg["lowercase"],
            strip_accents=tok_cfg["strip_accents"],
            unk_token=tok_cfg["unk_token"],
            pad_token=tok_cfg["pad_token"],
            max_chars_per_word=tok_cfg["max_chars_per_word"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _checkpoint_error(meta_path, f"invalid config or tokenizer ({exc})") from None
    try:
        weights = load_file(str(weights_path), device=str(device))
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise _checkpoint_error(weights_path, f"cannot be read ({exc})") from None
    recurrent: DualEncoderQA | None = None
    if config.model in RECURRENT_KINDS:  # the RDE family: its own tensors and builder
        try:
            recurrent = from_config(config, tokenizer, weights["embedding"].cpu().numpy())
        except (RuntimeError, ValueError, KeyError) as exc:
            raise _checkpoint_error(
                weights_path, f"tensors do not match the model ({' '.join(str(exc).split())[:300]})"
            ) from None
    sequence = config.model in ("qa-cnn", "qa-bilstm", *ATTENTIVE_MODELS)
    required = ("embedding",) if recurrent is not None else ("encoder.embedding",)
    for name in required if sequence or recurrent is not None else (*required, "encoder.proj.weight"):
        if name not in weights or weights[name].ndim != 2:
            raise _checkpoint_error(weights_path, f"tensor {name!r} is missing or not a matrix")
    emb = weights["embedding" if recurrent is not None else "encoder.embedding"]
    try:
        model = (
            recurrent
            if recurrent is not None
            else build_model(
                config.model,
                emb.shape[0],
                dim=config.dim if sequence else weights["encoder.proj.weight"].shape[0],
                embeddings=emb.cpu().numpy(),
                train_embeddings=config.train_embeddings
                if config.train_embeddings is not None
                else config.embeddings == "none",
                ball=state["ball"] if state["ball"] != "none" else "clip",
                max_norm=config.max_norm,
                learn_alpha=config.learn_alpha,
                init_norm=config.init_norm,
                ranking=config.ranking,
                window=config.window,
            )
        )
        model.load_state_dict(weights)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise _checkpoint_error(
            weights_path, f"tensors do not match the model ({' '.join(str(exc).split())[:300]})"
        ) from None
    model.eval()
    return TrainResult(
        model=model,
        tokenizer=tokenizer,
        config=config,
        best_epoch=state["best_epoch"],
        dev=state["dev"],
        history=state["history"],
        norms=state["norms"],
        data=state["data"],
        embeddings=state["embeddings"],
        seconds=state["seconds"],
        selection=state["selection"],
        diagnostics=state.get("diagnostics", {}),
    )
