"""Teacher vectors from all-mpnet-base-v2 computed on a lent GPU machine, carried in small pieces.

all-mpnet-base-v2 takes about 16 texts a second on this project's 2-core machine (three hours
for a 170K-text corpus) and under 20 seconds on one GPU. A GPU machine reached through the
device tool takes at most 64 MiB per call, its working tree included, and returns at most
64 MiB. So:

1. ``pack`` (here): the model's weight matrices as int8 rows with a float16 scale per row
   (every other tensor float16), in pieces of at most ``--piece-mb`` MB, plus its configuration
   files and the corpus's ``texts.jsonl`` gzipped, under ``OUT/p0`` … ``OUT/pN``. On 300 texts
   the rebuilt model's vectors have cosine 0.998 or more with the original's.
2. ``encode`` (there, once every piece has been copied into one folder, one call per piece):
   rebuilds the sentence-transformers folder, encodes every text (at most 128 tokens, as
   ``tools/teacher_embeddings.py`` does for MiniLM), and writes the centred coordinates on the
   top ``--dim`` principal directions as int8 rows with a float32 scale per row (three files
   of under 16 MiB each at 170K texts and 256 dimensions, and ``meta.npz``).
3. ``unpack`` (here): ``teacher.npy`` (float16, one row per line of ``texts.jsonl``) of a corpus
   folder that ``tools/build_default_model.py --corpus`` reads like MiniLM's.

The training reads a start table's teacher through a linear readout (``teacher_readout``), so
the principal coordinates serve as well as the full vectors up to the variance they drop
(``meta.npz`` ``kept``: 0.90 at 256 dimensions on the round-3 corpus).

Usage::

    python -m tools.device_teacher pack --corpus DIR --out .dev/mp
    # device tool, one call per piece: carry .dev/mp/pK, run `cp -r .dev/mp/pK /tmp/mp/`; then
    #   python3 tools/device_teacher.py encode --pieces /tmp/mp --out $OUT
    python -m tools.device_teacher unpack --files DIR_OF_RETURNED_FILES --corpus NEW_DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # everything else travels as it is
INT8_MIN_SIZE = 10_000  # matrices this large or larger travel as int8 rows
PARTS = 3  # returned files of coordinates (each under the device tool's 16 MiB per file)


def int8_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)``: ``x`` (2-D) as int8 rows and a float32 scale per row, ``x ≈ q · scale``
    (an all-zero row gets scale 1)."""
    scale = np.abs(x).max(axis=1, keepdims=True).astype(np.float32) / 127.0
    scale[scale == 0] = 1.0
    return np.clip(np.round(x / scale), -127, 127).astype(np.int8), scale


def pack(model_dir: Path, corpus: Path, out: Path, piece_mb: float) -> None:
    """Write the int8 pieces, the configuration and the gzipped texts under ``out``."""
    from safetensors.numpy import load_file

    shutil.rmtree(out, ignore_errors=True)
    pieces: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, tensor in load_file(str(model_dir / "model.safetensors")).items():
        t = np.asarray(tensor)
        if t.ndim == 2 and t.size >= INT8_MIN_SIZE:  # weight matrices: int8 rows, a scale per row
            q, scale = int8_rows(t)
            items = {f"{name}::q": q, f"{name}::s": scale.astype(np.float16)}
        else:
            items = {f"{name}::f": t.astype(np.float16) if t.dtype == np.float32 else t}
        nbytes = sum(v.nbytes for v in items.values())
        if size + nbytes > piece_mb * 1e6 and pieces[-1]:
            pieces.append({})
            size = 0
        pieces[-1].update(items)
        size += nbytes
    for k, piece in enumerate(pieces):
        (out / f"p{k}").mkdir(parents=True)
        np.savez(out / f"p{k}" / "weights.npz", **piece)  # type: ignore[arg-type]
    shutil.copytree(model_dir, out / "p0" / "config", ignore=lambda _, names: [n for n in names if n in WEIGHT_FILES])
    last = out / f"p{len(pieces) - 1}"
    with open(corpus / "texts.jsonl", "rb") as src, gzip.open(last / "texts.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    for k in range(len(pieces)):
        mb = sum(f.stat().st_size for f in (out / f"p{k}").rglob("*") if f.is_file()) / 1e6
        print(f"{out / f'p{k}'}: {mb:.1f} MB")


def rebuild(pieces: Path, target: Path) -> None:
    """The sentence-transformers folder from the pieces (float32 weights)."""
    import torch
    from safetensors.torch import save_file

    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(pieces / "p0" / "config", target)
    (target / "2_Normalize").mkdir(exist_ok=True)
    state = {}
    for path in sorted(pieces.glob("p*/weights.npz")):
        with np.load(path) as z:
            for key in z.files:
                name, kind = key.rsplit("::", 1)
                if kind == "q":
                    state[name] = torch.from_numpy(z[key].astype(np.float32) * z[f"{name}::s"].astype(np.float32))
                elif kind == "f":
                    value = z[key]
                    state[name] = torch.from_numpy(value.astype(np.float32) if value.dtype == np.float16 else value)
    save_file({k: v.contiguous() for k, v in state.items()}, str(target / "model.safetensors"))


def encode(pieces: Path, out: Path, dim: int, limit: int) -> None:
    """Encode the texts with the rebuilt model; write int8 principal coordinates and ``meta.npz``."""
    import torch
    from sentence_transformers import SentenceTransformer

    started = time.perf_counter()
    model_dir = pieces / "model"
    rebuild(pieces, model_dir)
    texts_file = next(pieces.glob("p*/texts.jsonl.gz"))
    with gzip.open(texts_file, "rt", encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    texts = texts[:limit] if limit else texts
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = SentenceTransformer(str(model_dir), device=device)
    model.max_seq_length = 128
    if device == "cuda":
        model.half()
    order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths batched together
    vectors = model.encode(
        [texts[i] for i in order], batch_size=512 if device == "cuda" else 32, normalize_embeddings=True
    )
    x = np.empty(vectors.shape, np.float32)
    x[order] = vectors
    centred = torch.from_numpy(x).to(device, torch.float64)
    mu = centred.mean(0)
    centred -= mu
    values, directions = torch.linalg.eigh(centred.T @ centred)
    top = directions[:, -dim:].flip(1).T  # (dim, D), widest first
    y = (centred @ top.T).float().cpu().numpy()
    q, scale = int8_rows(y)
    for k, rows in enumerate(np.array_split(np.arange(len(q)), PARTS)):
        np.save(out / f"coords{k}.npy", q[rows])
    kept = float(values[-dim:].sum() / values.sum())
    np.savez(out / "meta.npz", scale=scale, kept=kept, device=device)
    print(f"{len(x)} texts on {device}, {dim} principal coordinates keep {kept:.3f} of the variance, "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip


def unpack(files: Path, corpus: Path, source: Path) -> None:
    """``corpus/teacher.npy`` from the returned files; the rest of the corpus linked from ``source``."""
    coords = np.concatenate([np.load(files / f"coords{k}.npy") for k in range(PARTS)])
    with np.load(files / "meta.npz") as meta:
        vectors = coords.astype(np.float32) * meta["scale"]
    corpus.mkdir(parents=True, exist_ok=True)
    for name in ("texts.jsonl", "pairs.npy", "counts.json", "tokens.npz", "minilm-eval-cache.npz"):
        if (source / name).exists() and not (corpus / name).exists():
            (corpus / name).symlink_to((source / name).resolve())
    lines = sum(1 for _ in open(corpus / "texts.jsonl", "rb"))
    if lines != len(vectors):
        sys.exit(f"{files}: {len(vectors)} vectors for {lines} texts in {corpus / 'texts.jsonl'}")
    np.save(corpus / "teacher.npy", vectors.astype(np.float16))
    print(f"{corpus / 'teacher.npy'}: {vectors.shape}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="int8 pieces of the model and the gzipped texts (here)")
    p.add_argument("--corpus", type=Path, required=True, help="folder with texts.jsonl")
    p.add_argument("--out", type=Path, required=True, help="folder of the pieces p0 … pN")
    p.add_argument("--model", type=Path, default=None, help="sentence-transformers folder (default: mpnet's parts)")
    p.add_argument("--piece-mb", type=float, default=34.0, help="largest piece, MB")
    e = sub.add_parser("encode", help="rebuild the model and encode the texts (on the GPU machine)")
    e.add_argument("--pieces", type=Path, required=True, help="folder holding every piece p0 … pN")
    e.add_argument("--out", type=Path, required=True, help="folder of the returned files")
    e.add_argument("--dim", type=int, default=256, help="principal coordinates kept")
    e.add_argument("--limit", type=int, default=0, help="encode only the first N texts (a check)")
    u = sub.add_parser("unpack", help="teacher.npy of a corpus folder from the returned files (here)")
    u.add_argument("--files", type=Path, required=True, help="folder of the returned files")
    u.add_argument("--corpus", type=Path, required=True, help="new corpus folder (teacher.npy written there)")
    u.add_argument("--source", type=Path, required=True, help="the packed corpus (its other files are linked)")
    args = parser.parse_args()
    if args.command == "pack":
        if args.model is None:
            from qaindex_export.embeddings.packaged_models import mpnet_dir

            args.model = mpnet_dir()
        pack(args.model, args.corpus, args.out, args.piece_mb)
    elif args.command == "encode":
        encode(args.pieces, args.out, args.dim, args.limit)
    else:
        unpack(args.files, args.corpus, args.source)


if __name__ == "__main__":
    main()
