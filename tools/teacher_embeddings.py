"""Encode the training corpus with the teacher (all-MiniLM-L6-v2) once, cached and resumable.

The corpus is cut into random parts of ``PART`` shards, each sorted by length and encoded in
batches (at most 128 tokens each); every
``--shard`` texts of that order are saved as ``OUT/shards/NNNNN.npy`` (float16, unit rows),
so a killed run resumes at the first missing shard. When every shard exists they are
assembled into ``OUT/teacher.npy`` (float16, one row per line of ``texts.jsonl``, in its order).

``OUT/shards*/shards.json`` records the shard size; a run that would resume a folder with another
``--shard`` stops (its shards would cover other texts than their names say).

``--first N`` encodes only the texts from line ``N`` on (a corpus extended with
``python -m tools.training_corpus --extend``: the earlier texts keep their lines and their shards), into
``OUT/shards-N/``, in a seeded random order of those texts, so a partial run covers a random
sample of every new source. ``tools/build_default_model.py`` reads every ``shards*`` folder.

Usage::

    python -m tools.teacher_embeddings --corpus /path/to/traindata [--shard 8192] [--threads 2] [--first N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
PART = 4  # shards per randomly drawn, length-sorted part
SHARDS_FILE = "shards.json"


def shard_size(shards: Path) -> int | None:
    """Texts per shard of a shards folder: recorded in ``shards.json``, or (a folder written before
    it existed) the length of its first shard; None for a folder without shards."""
    if (shards / SHARDS_FILE).is_file():
        return int(json.loads((shards / SHARDS_FILE).read_text(encoding="utf-8"))["shard"])
    first = shards / "00000.npy"
    return len(np.load(first, mmap_mode="r")) if first.is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="folder with texts.jsonl (tools/training_corpus.py)")
    parser.add_argument("--shard", type=int, default=8192, help="texts per cached shard")
    parser.add_argument("--batch", type=int, default=128, help="texts per teacher batch")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument(
        "--limit", type=int, default=0, help="encode only the first N texts of the length order (0: all)"
    )
    parser.add_argument("--first", type=int, default=0, help="encode only the texts from this line on")
    args = parser.parse_args()

    import torch
    from qaindex_export.embeddings.spec import minilm_dir
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    with open(args.corpus / "texts.jsonl", encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    # random parts of PART shards each (texts.jsonl is already in a seeded random order), each sorted
    # by length: a partial run has encoded a random sample of the corpus, with little padding
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    part = args.shard * PART
    if args.first:
        # the appended texts come source by source: shuffle them (seeded) before cutting parts
        lines = args.first + np.random.default_rng(0).permutation(len(texts) - args.first)
        shards = args.corpus / f"shards-{args.first}"
    else:  # texts.jsonl is already in a seeded random order
        lines = np.arange(len(texts))
        shards = args.corpus / "shards"
    parts = (lines[p : p + part] for p in range(0, len(lines), part))
    order = np.concatenate([rows[np.argsort(lengths[rows], kind="stable")] for rows in parts])
    total = len(order) if not args.limit else min(args.limit, len(order))
    shards.mkdir(exist_ok=True)
    recorded = shard_size(shards)
    if recorded is not None and recorded != args.shard:
        sys.exit(f"{shards} holds shards of {recorded} texts; rerun with --shard {recorded}, or delete the folder")
    (shards / SHARDS_FILE).write_text(json.dumps({"shard": args.shard, "texts": len(order)}), encoding="utf-8")
    np.save(shards / "order.npy", order)
    model = SentenceTransformer(os.fspath(minilm_dir()), device="cpu", local_files_only=True)
    model.max_seq_length = 128
    done = 0
    start = time.perf_counter()
    for first in range(0, total, args.shard):
        path = shards / f"{first // args.shard:05d}.npy"
        if path.exists():
            continue
        chunk = [texts[i] for i in order[first : min(first + args.shard, total)]]
        with torch.inference_mode():
            vectors = model.encode(chunk, batch_size=args.batch, normalize_embeddings=True, convert_to_numpy=True)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, vectors.astype(np.float16))
        tmp.replace(path)
        done += len(chunk)
        rate = done / (time.perf_counter() - start)
        print(f"{path.name}: {first + len(chunk)}/{total} texts, {rate:.0f} texts/s this run, "
              f"mean chars {np.mean([len(t) for t in chunk]):.0f}", flush=True)  # fmt: skip
    if total == len(order) and not args.first:
        out = np.zeros((len(texts), 384), dtype=np.float16)
        for k, first in enumerate(range(0, total, args.shard)):
            out[order[first : first + args.shard]] = np.load(shards / f"{k:05d}.npy")
        np.save(args.corpus / "teacher.npy", out)
        print(f"teacher.npy: {out.shape}", file=sys.stderr)


if __name__ == "__main__":
    main()
