"""Whole-corpus (pooled) retrieval: qaindex models vs MiniLM exact cosine vs BM25, and encoding speed.

Each pool is every distinct answer of a split; each question with a correct answer is
searched against all of them (MRR@10, recall@10, P@1):

- WikiQA test.filtered, TrecQA raw test, TrecQA clean test (``../shared/datasets``; research
  licences: evaluation only), and the example FAQ (``examples/faq.jsonl``: its stored
  ``questions`` against all 289 answers).

Every pool also holds the fixed junk answers ``JUNK_ANSWERS`` (one character, digits,
punctuation runs, emoji, out-of-vocabulary scripts; never relevant): real corpora hold such
records, and a model that puts them near every question (a hub) must show it here.
Besides MRR@10 / recall@10 / P@1 (measured *with* the junk present), each system reports
``junk@10``: the share of questions with at least one junk answer in its top 10.

Systems, in the same run:

- qaindex models through the real :class:`qaindex.Ranker` (the path of ``qaindex.eval.evaluate.evaluate_pooled``):
  the previous built-in default (research-only, extracted from git at ``--previous``), the
  current built-in default (the distilled table + a head fine-tuned without labels on the FAQ
  answers, see ``tools/build_default_model.py``), the distilled tables without training
  (PCA dimensions and token weightings), and
  (``--own``) distilled + unlabelled fine-tuning on each pool's own answers (no labels: what
  ``qaindex train CORPUS --teacher minilm`` does for a user);
- all-MiniLM-L6-v2 (the teacher) with exact cosine over every answer;
- BM25 (``bm25s``, English stopwords).

Encoding speed: answers per second on a fixed sample of WikiQA answers, 1 and 2 threads, for
each qaindex model (onnxruntime) and for MiniLM (torch).

Writes ``benchmarks/results/pooled.json`` and ``docs/pooled-table.md``.

With ``--corpora DIR`` it evaluates instead the corpora built by ``tools/corpora.py``
(product FAQ, StackFAQ paraphrases, SemEval forum QA, AWS documentation passages, the
WikiQA/TrecQA test splits; see ``docs/user-corpora.md``): every answer of each corpus plus the
junk indexed, for the built-in default and every ``--model`` through the Ranker, ``--own``
(``qaindex train answers.jsonl --teacher minilm`` per corpus), bm25s with the English stemmer
and stopwords, and MiniLM (vectors cached under ``benchmarks/.cache/``); ratios to bm25s and
MiniLM, and the answers' mean pairwise cosine and norm mean/std per dense model. Writes
``benchmarks/results/user_corpora.json`` and ``docs/user-corpora-table.md``.

Usage::

    python -m benchmarks.quality.pooled [--data ../shared/datasets] [--own] [--previous 8992d94]
    python -m benchmarks.quality.pooled --corpora DIR [--model [NAME=]DIR ...] [--own] [--only CORPUS ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import ROOT, argument_parser, per_call_ms, timed, write_results
from benchmarks.quality.pooled_eval import (
    JUNK_ANSWERS,
    K,
    eval_bm25,
    eval_dense,
    eval_qaindex,
    eval_qaindex_model,
    junk_rows,
    load_pools,
    minilm_encoder,
    pool_answers,
    questions_and_relevant,
    real_answers,
    with_junk,
)
from qaindex.eval.datasets import Candidate, QuestionGroup
from qaindex.model import DEFAULT_MODEL_DIR, Model

SPEED_SAMPLE = 2000
MINILM_SPEED_SAMPLE = 400
SPEED_QUESTIONS = 20  # per corpus, for the one-question encoding time of --corpora
PREVIOUS_DEFAULT_REV = "8992d94"  # main before the distilled default: WikiQA+TrecQA HyperQA
DISTILLED_VARIANTS = [(128, "zipf"), (256, "zipf"), (256, "sif")]  # (PCA dim, token weighting; SIF a = 1e-4)
FT_MODEL = "hyperqa"  # head of the fine-tuned candidates (see benchmarks/results/default_model.json)
FT_BALL = "weighted"  # with the relative ranking
# ------------------------------------------------------------------------ speed


def speed_qaindex(model_dir: Path, texts: list[str]) -> dict[str, float]:
    """Answers/s of ``Model.encode`` (batch 256) with 1 and 2 onnxruntime threads (best of 3)."""
    out = {}
    for threads in (1, 2):
        model = Model.load(model_dir, threads=threads, device="cpu")
        model.encode(texts[:256], role="answer")
        best = min(timed(lambda m=model: m.encode(texts, role="answer"))[0] for _ in range(3))
        out[f"{threads}_thread"] = len(texts) / best
    return out


def question_speed(model_dir: Path, questions: list[str]) -> dict[str, float]:
    """Milliseconds to encode one question (``Model.encode([q])``, one onnxruntime thread):
    median and mean over ``questions``, after five untimed calls."""
    model = Model.load(model_dir, threads=1, device="cpu")
    ms = np.array(per_call_ms(lambda q: model.encode([q], role="question"), questions, warm=5))
    return {"median_ms": float(np.median(ms)), "mean_ms": float(ms.mean()), "questions": len(questions)}


def speed_minilm(texts: list[str]) -> dict[str, float]:
    """Answers/s of MiniLM (sentence-transformers, batch 64, CPU) with 1 and 2 torch threads."""
    import torch

    out = {}
    old = torch.get_num_threads()
    encode = minilm_encoder()
    encode(texts[:64])
    for threads in (1, 2):
        torch.set_num_threads(threads)
        out[f"{threads}_thread"] = len(texts) / timed(lambda: encode(texts))[0]
    torch.set_num_threads(old)
    return out


# ------------------------------------------------------------------------ candidate models


def previous_default(rev: str, target: Path) -> Path | None:
    """Extract ``qaindex/models/default`` as it was at git revision ``rev`` (None if unavailable)."""
    try:
        names = subprocess.run(
            ["git", "ls-tree", "--name-only", f"{rev}:qaindex/models/default"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            blob = subprocess.run(
                ["git", "show", f"{rev}:qaindex/models/default/{name}"], cwd=ROOT, check=True, capture_output=True
            ).stdout
            (target / name).write_bytes(blob)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    return target


def distilled_model(
    dim: int, weighting: str, out: Path, *, geometry: str = "poincare", ranking: str | None = None
) -> Path:
    """Export the distilled MiniLM table (no training) as a model directory."""
    from qaindex_export.embeddings.distill import distill_minilm
    from qaindex_export.exporting.table_export import export_table_model

    table = distill_minilm(dim=dim, weighting=weighting)
    return export_table_model(
        table, out, name=f"distilled-minilm-{dim}-{weighting}", geometry=geometry, ranking=ranking
    )


def finetuned_model(
    answers: Sequence[str],
    out: Path,
    *,
    dim: int = 256,
    weighting: str = "sif",
    epochs: int = 10,
    seed: int = 0,
    model: str = FT_MODEL,
    ball: str = FT_BALL,
    name: str = "distilled-minilm-ft",
    log: Callable[[str], None] | None = None,
) -> tuple[Path, list[str]]:
    """Distilled table + unlabelled fine-tuning of the head on ``answers``; returns (dir, command).

    The same as ``qaindex train CORPUS --teacher minilm --embeddings distilled:TABLE`` with
    these settings.
    """
    from qaindex_export.embeddings.distill import distill_minilm, minilm_sentence_teacher, save_table
    from qaindex_export.exporting.onnx_export import export_model
    from qaindex_export.training.train import TrainConfig, train_unlabelled

    table = distill_minilm(dim=dim, weighting=weighting)
    path = save_table(table, out.parent / f"{out.name}.table.npz")
    config = TrainConfig(model=model, embeddings=f"distilled:{path}", ball=ball, dim=300, epochs=epochs, seed=seed,
                         lr=0.02, optimizer="adam", batch_size=64)  # fmt: skip
    result = train_unlabelled(config, answers, minilm_sentence_teacher(), embeddings=table.embeddings(), log=log)
    export_model(result, out, name=name)
    command = [
        "qaindex", "train", "CORPUS.jsonl", "--teacher", "minilm", "--embeddings", f"distilled:{path}",
        "--model", model, "--ball", ball, "--dim", "300", "--lr", "0.02", "--optimizer", "adam", "--batch-size", "64",
        "--epochs", str(epochs), "--seed", str(seed), "--out", "DIR",
    ]  # fmt: skip
    return out, command


# ------------------------------------------------------------------------ report


def table_markdown(results: dict[str, dict[str, Any]], speed: dict[str, dict[str, float]]) -> str:
    labels = list(next(iter(results.values())).keys())
    head = (
        "| system | " + " | ".join(f"{lab} MRR@10 / R@10 / P@1 / junk@10" for lab in labels)
        + " | answers/s (1 thr / 2 thr) |"
    )  # fmt: skip
    lines = [head, "|" + "---|" * (len(labels) + 2)]
    minilm = results.get("MiniLM exact cosine")
    for system, per_pool in results.items():
        cells = []
        for lab in labels:
            r = per_pool[lab]
            cell = f"{r['mrr@10']:.3f} / {r['recall@10']:.3f} / {r['p@1']:.3f} / {r['junk@10']:.2f}"
            if minilm is not None and system != "MiniLM exact cosine":
                cell += f" ({r['mrr@10'] / minilm[lab]['mrr@10']:.2f}×)"
            cells.append(cell)
        sp = speed.get(system)
        cells.append(f"{sp['1_thread']:,.0f} / {sp['2_thread']:,.0f}" if sp else "-")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------ user-like corpora

# Corpora written by tools/corpora.py (``--corpora DIR``), in this order when present.
CORPORA = ("product-faq", "stackfaq", "semeval-cqa", "aws-docs", "wikiqa", "trecqa-raw", "trecqa-clean")
CORPORA_RESULTS = ROOT / "benchmarks" / "results" / "user_corpora.json"
CORPORA_TABLE = ROOT / "docs" / "user-corpora-table.md"
CACHE_DIR = ROOT / "benchmarks" / ".cache"  # git-ignored: MiniLM vectors per corpus
BM25_STEMMED = "bm25s (English stemmer + stopwords)"
MINILM = "MiniLM exact cosine"
HYBRID = "qaindex default + BM25 (hybrid, the default search)"
ISOTROPY_KEYS = ("mean_pairwise_cosine", "norm_mean", "norm_std")
ISOTROPY_TARGETS = {"mean_pairwise_cosine_max": 0.3, "norm_std_min": 0.05}


def corpus_groups(
    answers: Sequence[tuple[str, str]], questions: Sequence[tuple[str, Sequence[str]]], *, junk: bool = True
) -> list[QuestionGroup]:
    """Question groups of a corpus (``tools/corpora.py`` format) for the pooled evaluation.

    The first group holds every answer (question-less, label 0) so that the pool is the
    whole corpus in its own order; each question's group lists only its relevant answers
    (label 1); the junk answers are added unless ``junk=False``.
    """
    texts = dict(answers)
    groups = [QuestionGroup("pool", "", tuple(Candidate(aid, text, 0) for aid, text in answers))]
    for i, (question, rel) in enumerate(questions):
        missing = [a for a in rel if a not in texts]
        if missing:
            raise ValueError(f"question {i} ({question[:60]!r}) names unknown answer id {missing[0]!r}")
        groups.append(QuestionGroup(f"q{i}", question, tuple(Candidate(a, texts[a], 1) for a in rel)))
    return with_junk(groups) if junk else groups


def load_corpora(folder: Path, names: Sequence[str] = (), *, junk: bool = True) -> dict[str, list[QuestionGroup]]:
    """Question groups of every corpus folder under ``folder`` (``CORPORA`` order, then others
    alphabetically; only ``names`` when given)."""
    from benchmarks.quality.corpus_format import read_corpus_dir

    present = [p.name for p in sorted(folder.iterdir()) if (p / "answers.jsonl").is_file()] if folder.is_dir() else []
    order = [n for n in CORPORA if n in present] + [n for n in present if n not in CORPORA]
    if names:
        unknown = [n for n in names if n not in present]
        if unknown:
            raise SystemExit(f"error: no corpus {unknown[0]!r} under {folder} (have: {', '.join(order) or 'none'})")
        order = [n for n in order if n in names]
    if not order:
        raise SystemExit(f"error: no corpus under {folder}; build them with python -m tools.corpora --data {folder}")
    pools = {}
    for name in order:
        corpus = read_corpus_dir(folder / name)
        pools[name] = corpus_groups(corpus.answers, corpus.questions, junk=junk)
    return pools


def isotropy(vectors: np.ndarray) -> dict[str, float]:
    """Mean pairwise cosine of the vectors (exact, over all pairs i != j) and their norms.

    With unit vectors ``u_i``, ``sum_{i != j} u_i . u_j = |sum_i u_i|^2 - n``, so the mean is
    ``(|sum u|^2 - n) / (n (n - 1))`` in O(n d).

    >>> round(isotropy(np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]]))["mean_pairwise_cosine"], 6)
    -0.333333
    """
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1)
    n = len(v)
    unit = v / np.maximum(norms, 1e-12)[:, None]
    total = unit.sum(axis=0)
    mean_cos = float((total @ total - n) / (n * (n - 1))) if n > 1 else float("nan")
    return {"mean_pairwise_cosine": mean_cos, "norm_mean": float(norms.mean()), "norm_std": float(norms.std())}


def cached_encoder(
    encode: Callable[[list[str]], np.ndarray], tag: str, cache: Path = CACHE_DIR
) -> Callable[[list[str]], np.ndarray]:
    """``encode`` with its outputs stored under ``cache/tag-<sha1 of the texts>.npy``."""
    import hashlib

    def cached(texts: list[str]) -> np.ndarray:
        digest = hashlib.sha1("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:20]
        path = cache / f"{tag}-{len(texts)}-{digest}.npy"
        if path.is_file():
            return np.asarray(np.load(path))
        vectors = encode(texts)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(path)
        return vectors

    return cached


def qaindex_isotropy(model_dir: Path, pools: dict[str, list[QuestionGroup]]) -> dict[str, dict[str, float]]:
    """``isotropy`` of each corpus's real answers (no junk) as the model encodes them."""
    model = Model.load(model_dir, threads=None)
    return {label: isotropy(model.encode(real_answers(groups), role="answer")) for label, groups in pools.items()}


def own_model(answers_file: Path, out: Path) -> tuple[Path, float]:
    """``qaindex train ANSWERS --teacher minilm --out OUT`` (the CLI, default recipe); returns
    (model directory, seconds)."""
    command = [sys.executable, "-m", "qaindex", "train", os.fspath(answers_file), "--teacher", "minilm",
               "--out", os.fspath(out)]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out, time.perf_counter() - started


def model_label(spec: str) -> tuple[str, Path]:
    """``NAME=DIR`` or ``DIR`` (named by its manifest) for ``--model``."""
    name, sep, path = spec.partition("=")
    if not sep:
        path = spec
        try:
            name = str(Model.read_manifest(Path(path)).get("name") or Path(path).name)
        except Exception:  # noqa: BLE001 - any unreadable manifest: fall back to the folder name
            name = Path(path).name
    return name, Path(path)


def with_ratios(results: dict[str, dict[str, Any]]) -> None:
    """Add ``x_bm25`` and ``x_minilm`` (MRR@10 over bm25s-stemmed's and MiniLM's, same
    corpus) to every system's per-corpus results, in place."""
    for per_corpus in results.values():
        for label, r in per_corpus.items():
            for key, base in (("x_bm25", BM25_STEMMED), ("x_minilm", MINILM)):
                ref = results.get(base, {}).get(label)
                if ref is not None and ref["mrr@10"] > 0:
                    r[key] = r["mrr@10"] / ref["mrr@10"]


def corpora_markdown(out: dict[str, Any]) -> str:
    """Tables of a ``--corpora`` run: MRR@10 with ratios, R@10 / P@1 / junk@10, isotropy."""
    labels = list(out["corpora"])
    results = out["results"]
    head = "| system | " + " | ".join(labels) + " |"
    rule = "|---|" + "---|" * len(labels)
    mrr = [head, rule]
    rest = [head, rule]
    iso = [head, rule]
    for system, per in results.items():
        cells, more, geo = [], [], []
        for lab in labels:
            r = per[lab]
            ratios = []
            if "x_bm25" in r and system != BM25_STEMMED:
                ratios.append(f"{r['x_bm25']:.2f}× bm25")
            if "x_minilm" in r and system != MINILM:
                ratios.append(f"{r['x_minilm']:.2f}× MiniLM")
            cells.append(f"**{r['mrr@10']:.3f}**" + (f" ({', '.join(ratios)})" if ratios else ""))
            more.append(f"{r['recall@10']:.3f} / {r['p@1']:.3f} / {r['junk@10']:.2f}")
            geo.append(
                f"{r['mean_pairwise_cosine']:.2f} / {r['norm_mean']:.3f} ± {r['norm_std']:.3f}"
                if "mean_pairwise_cosine" in r else "-"
            )  # fmt: skip
        mrr.append(f"| {system} | " + " | ".join(cells) + " |")
        rest.append(f"| {system} | " + " | ".join(more) + " |")
        iso.append(f"| {system} | " + " | ".join(geo) + " |")
    about = ["| corpus | kind | answers | questions | source | licence |", "|---|---|---|---|---|---|"]
    for lab, c in out["corpora"].items():
        src = c.get("source", {})
        url = src.get("url", src.get("path", "-"))
        commit = f" ({src['commit'][:7]})" if src.get("commit") else ""
        about.append(
            f"| {lab} | {src.get('kind', 'answer selection test split')} | {c['answers']:,} | {c['questions']} | "
            f"{url}{commit} | {src.get('licence', '-')} |"
        )
    return (
        "### Corpora\n\n" + "\n".join(about)
        + "\n\n### MRR@10 (every answer of the corpus indexed; ratios to bm25s and MiniLM in the same run)\n\n"
        + "\n".join(mrr)
        + "\n\n### recall@10 / P@1 / junk@10\n\n" + "\n".join(rest)
        + question_speed_markdown(out.get("question_encode_ms", {}))
        + "\n\n### Answer vectors: mean pairwise cosine / norm mean ± std "
        f"(targets: cosine ≤ {ISOTROPY_TARGETS['mean_pairwise_cosine_max']}, "
        f"norm std ≥ {ISOTROPY_TARGETS['norm_std_min']})\n\n" + "\n".join(iso) + "\n"
    )  # fmt: skip


def question_speed_markdown(question_ms: dict[str, dict[str, float]]) -> str:
    """The one-question encoding times of a ``--corpora`` run ('' when it has none)."""
    if not question_ms:
        return ""
    rows = [f"| {system} | {r['median_ms']:.2f} | {r['mean_ms']:.2f} |" for system, r in question_ms.items()]
    n = next(iter(question_ms.values()))["questions"]
    return (
        f"\n\n### Encoding one question (ms; {n} questions, the first {SPEED_QUESTIONS} of each corpus, "
        "one at a time, one onnxruntime thread)\n\n| system | median | mean |\n|---|---|---|\n" + "\n".join(rows)
    )


def run_corpora(args: argparse.Namespace) -> None:
    """The ``--corpora`` run: every corpus, every system, one results file and one table."""
    folder = Path(args.corpora)
    pools = load_corpora(folder, args.only)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}

    def report(system: str, res: dict[str, Any]) -> None:
        results[system] = res
        cells = "  ".join(
            f"{lab[:12]:>12} {r['mrr@10']:.3f}/{r['recall@10']:.3f}/{r['p@1']:.3f}" for lab, r in res.items()
        )
        print(f"{system[:44]:44} {cells}", flush=True)

    def with_geometry(res: dict[str, Any], geo: dict[str, dict[str, float]]) -> dict[str, Any]:
        return {lab: {**r, **geo[lab]} for lab, r in res.items()}

    models = {f"qaindex default ({Model.read_manifest(DEFAULT_MODEL_DIR)['name']})": DEFAULT_MODEL_DIR}
    models.update(model_label(spec) for spec in args.model)
    speed_questions = [q for groups in pools.values() for q in questions_and_relevant(groups)[0][:SPEED_QUESTIONS]]
    question_ms = {}
    for system, path in models.items():
        # the isotropy encodes every answer again: --no-isotropy spares that for a large model
        geo = qaindex_isotropy(path, pools) if args.isotropy else {lab: {} for lab in pools}
        report(system, with_geometry(eval_qaindex(path, pools, batch_size=args.batch_size), geo))
        question_ms[system] = question_speed(path, speed_questions)
    if args.hybrid:  # the built-in default as `qaindex build` + `search` run it: fused with BM25
        default = next(iter(models))
        report(HYBRID, with_geometry(eval_qaindex(DEFAULT_MODEL_DIR, pools, hybrid=True), {
            lab: {k: v for k, v in r.items() if k in ISOTROPY_KEYS} for lab, r in results[default].items()
        }))  # fmt: skip
    own_seconds: dict[str, float] = {}
    if args.own:
        with tempfile.TemporaryDirectory() as tmpdir:
            own: dict[str, Any] = {}
            own_geo: dict[str, dict[str, float]] = {}
            for label, groups in pools.items():
                d, own_seconds[label] = own_model(folder / label / "answers.jsonl", Path(tmpdir) / label)
                own[label] = eval_qaindex_model(Model.load(d, threads=None), groups)
                own_geo.update(qaindex_isotropy(d, {label: groups}))
            report("qaindex train --teacher minilm (own answers)", with_geometry(own, own_geo))
    report(BM25_STEMMED, eval_bm25(pools, stem=True))
    encode = minilm_encoder()
    minilm_res: dict[str, Any] = {}
    minilm_geo: dict[str, dict[str, float]] = {}
    for label, groups in pools.items():
        cached = cached_encoder(encode, f"minilm-{label}")
        minilm_res.update(eval_dense(cached, {label: groups}))
        # the pool's vectors again (from the cache), without the junk rows
        minilm_geo[label] = isotropy(np.delete(cached(pool_answers(groups)), junk_rows(groups), axis=0))
    report(MINILM, with_geometry(minilm_res, minilm_geo))
    with_ratios(results)
    from benchmarks.quality.corpus_format import read_corpus_dir

    corpora_info = {}
    for label in pools:
        meta = read_corpus_dir(folder / label).meta
        r = results[BM25_STEMMED][label]
        corpora_info[label] = {"answers": r["answers"] - len(JUNK_ANSWERS), "questions": r["questions"],
                               "junk_answers": len(JUNK_ANSWERS), "source": meta.get("source", {})}  # fmt: skip
    command = "python -m benchmarks.quality.pooled --corpora DIR" + "".join(f" --model {s}" for s in args.model)
    command += "".join(f" --only {name}" for name in args.only)
    command += " --own" if args.own else ""
    command += " --hybrid" if args.hybrid else ""
    command += "" if args.isotropy else " --no-isotropy"
    command += f" --batch-size {args.batch_size}" if args.batch_size != 256 else ""
    if args.table:  # paths inside the repository as relative paths
        shown = [os.path.relpath(Path(f).resolve(), ROOT) if Path(f).resolve().is_relative_to(ROOT) else f
                 for f in (args.out or CORPORA_RESULTS, args.table)]  # fmt: skip
        command += f" --out {shown[0]} --table {shown[1]}"
    out = {
        "k": K,
        "corpora": corpora_info,
        "results": results,
        "isotropy_targets": ISOTROPY_TARGETS,
        "own_training_seconds": own_seconds,
        "question_encode_ms": question_ms,
        "seconds": time.perf_counter() - started,
        "command": command,
    }
    target = Path(args.out) if args.out else CORPORA_RESULTS
    write_results(target, out)
    table = Path(args.table) if args.table else CORPORA_TABLE if target.resolve() == CORPORA_RESULTS.resolve() else None
    if table is not None:
        table.write_text(
            "# Retrieval on corpora that look like users' corpora\n\n"
            "<!-- generated by benchmarks/quality/pooled.py --corpora; do not edit by hand -->\n\n"
            "Every question searched against every answer of its corpus plus "
            f"{len(JUNK_ANSWERS)} junk answers (never relevant; junk@10 = share of questions with junk in "
            "their top 10). qaindex models go through the real Ranker (FAISS + exact rerank); "
            "bm25s uses the PyStemmer English stemmer and English stopwords; MiniLM is "
            "all-MiniLM-L6-v2 with exact cosine. See [user-corpora.md](user-corpora.md) for how "
            "each corpus is built.\n\n" + corpora_markdown(out) + f"\nGenerated by `{command}`.\n"
        )
    print(f"wrote {target} in {out['seconds']:.0f}s")


def main() -> None:
    parser = argument_parser(__doc__, data=True)
    parser.add_argument("--previous", default=PREVIOUS_DEFAULT_REV, help="git revision of the previous default")
    parser.add_argument("--own", action="store_true", help="also fine-tune on each pool's own answers")
    parser.add_argument(
        "--hybrid", action="store_true", help="with --corpora: also the default model fused with BM25 (hybrid search)"
    )
    parser.add_argument("--epochs", type=int, default=10, help="epochs of unlabelled fine-tuning")
    parser.add_argument("--geometry", default="poincare", choices=["poincare", "cosine"], help="distilled models")
    parser.add_argument("--ranking", default="relative", help="manifest geometry 'ranking' field for distilled models")
    parser.add_argument(
        "--model", action="append", default=[], metavar="[NAME=]DIR", help="extra qaindex model directory (repeatable)"
    )
    parser.add_argument(
        "--corpora", default=None, metavar="DIR",
        help="evaluate the corpora built by tools/corpora.py under DIR instead (writes user_corpora.json)",
    )  # fmt: skip
    parser.add_argument("--only", action="append", default=[], help="with --corpora: only these corpora (repeatable)")
    parser.add_argument("--out", default=None, help="results file (default: pooled.json, or user_corpora.json)")
    parser.add_argument(
        "--table", default=None, metavar="FILE",
        help="with --corpora: the markdown table to write (default: docs/user-corpora-table.md with the default --out)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=int, default=256,
        help="with --corpora: texts per encoder call of the --model systems (lower it for a large transformer)",
    )  # fmt: skip
    parser.add_argument(
        "--no-isotropy", dest="isotropy", action="store_false",
        help="with --corpora: skip the answer-vector isotropy of qaindex models (it encodes every answer again)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.corpora:
        run_corpora(args)
        return
    args.out = args.out or str(ROOT / "benchmarks" / "results" / "pooled.json")
    data = Path(args.data)
    pools = load_pools(data)
    results: dict[str, dict[str, Any]] = {}
    speed: dict[str, dict[str, float]] = {}
    sample = real_answers(pools["WikiQA test"])[:SPEED_SAMPLE]
    started = time.perf_counter()

    def report(system: str, res: dict[str, Any]) -> None:
        results[system] = res
        cells = "  ".join(
            f"{lab[:12]:>12} {r['mrr@10']:.3f}/{r['recall@10']:.3f}/{r['p@1']:.3f} junk {r['junk@10']:.2f}"
            for lab, r in res.items()
        )
        print(f"{system:44} {cells}", flush=True)

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        models: dict[str, Path] = {}
        prev = previous_default(args.previous, tmp / "previous-default")
        if prev is not None:
            models[f"previous default ({args.previous}, research-only)"] = prev
        models[f"current default ({Model.read_manifest(DEFAULT_MODEL_DIR)['name']})"] = DEFAULT_MODEL_DIR
        for dim, weighting in DISTILLED_VARIANTS:
            models[f"distilled {dim}-d {weighting} (no training)"] = distilled_model(
                dim, weighting, tmp / f"d{dim}{weighting}", geometry=args.geometry, ranking=args.ranking
            )
        models.update(model_label(spec) for spec in args.model)
        for system, path in models.items():
            report(system, eval_qaindex(path, pools))
            speed[system] = speed_qaindex(path, sample)
        if args.own:
            own: dict[str, Any] = {}
            for label, groups in pools.items():
                d, _ = finetuned_model(real_answers(groups), tmp / f"own-{len(own)}", epochs=args.epochs)
                own[label] = eval_qaindex_model(Model.load(d, threads=None), groups)
            report(f"distilled 256-d sif + {FT_MODEL} {FT_BALL} head ft on own pool answers (no labels)", own)
    report("MiniLM exact cosine", eval_dense(minilm_encoder(), pools))
    speed["MiniLM exact cosine"] = speed_minilm(sample[:MINILM_SPEED_SAMPLE])
    report("BM25 (bm25s)", eval_bm25(pools))
    for system, sp in speed.items():
        print(f"speed {system:44} {sp['1_thread']:>10,.0f} /s (1 thread)  {sp['2_thread']:>10,.0f} /s (2 threads)")
    out = {
        "k": K,
        "pools": {
            lab: {"questions": r["questions"], "answers": r["answers"], "junk_answers": len(JUNK_ANSWERS)}
            for lab, r in results["BM25 (bm25s)"].items()
        },
        "junk_answers": JUNK_ANSWERS,
        "results": results,
        "speed_answers_per_second": speed,
        "speed_sample": {"texts": len(sample), "minilm_texts": MINILM_SPEED_SAMPLE, "source": "WikiQA test answers"},
        "seconds": time.perf_counter() - started,
        "command": "python -m benchmarks.quality.pooled" + (" --own" if args.own else ""),
    }
    write_results(args.out, out)
    md = ROOT / "docs" / "pooled-table.md"
    md.write_text(
        "# Whole-corpus retrieval (pooled)\n\n"
        "<!-- generated by benchmarks/quality/pooled.py; do not edit by hand -->\n\n"
        "Every question searched against every distinct answer of its split **plus "
        f"{len(JUNK_ANSWERS)} junk answers** (one character, digits, punctuation runs, emoji, "
        "out-of-vocabulary scripts; never relevant): MRR@10 / recall@10 / P@1 measured with the junk "
        "present, and junk@10, the share of questions with a junk answer in their top 10 (in brackets: "
        "MRR@10 relative to MiniLM in the same run). qaindex models go through the real "
        "Ranker (FAISS + exact rerank). Encoding speed: answers/s on "
        f"{len(sample)} WikiQA answers ({MINILM_SPEED_SAMPLE} for MiniLM), CPU.\n\n"
        + table_markdown(results, speed)
        + f"\n\nGenerated by `{out['command']}`.\n"
    )
    if Path(args.out).resolve() == RESULTS:
        from benchmarks.readme_markers import replace_section

        replace_section(README_SECTION, readme_body(out))
    print(f"wrote {args.out}, {md} and the README section in {out['seconds']:.0f}s")


if __name__ == "__main__":
    sys.exit(main())


RESULTS = ROOT / "benchmarks" / "results" / "pooled.json"
README_SECTION = "pooled"
_README_SYSTEMS = ("current default", "distilled 256-d sif (no training)", "MiniLM exact cosine", "BM25 (bm25s)")


def readme_body(results: dict[str, Any]) -> str:
    """The whole-corpus table of docs/models.md: the shipped default beside MiniLM and BM25 (checked by
    tests/docs/test_claims.py against ``benchmarks/results/pooled.json``)."""
    pools = list(results["pools"])
    systems = [name for name in results["results"] if name.startswith(_README_SYSTEMS)]
    minilm = results["results"]["MiniLM exact cosine"]
    lines = [
        "| system | " + " | ".join(f"{pool} MRR@10 (× MiniLM) / junk@10" for pool in pools) + " | answers/s |",
        "|---|" + "---|" * len(pools) + "---|",
    ]
    for name in systems:
        cells = []
        for pool in pools:
            r = results["results"][name][pool]
            ratio = "" if name.startswith("MiniLM") else f" ({r['mrr@10'] / minilm[pool]['mrr@10']:.2f}×)"
            cells.append(f"{r['mrr@10']:.3f}{ratio} / {r['junk@10']:.2f}")
        speed = results["speed_answers_per_second"].get(name)
        shown = f"{speed['1_thread']:,.0f}" if speed else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {shown} |")
    junk = len(results["junk_answers"])
    return (
        "\n".join(lines)
        + f"\n\nEvery question of each test split searched against every distinct answer of the split plus {junk} "
        "junk answers (junk@10: share of questions with junk in their top 10); generated by "
        "`python -m benchmarks.quality.pooled` (all systems: [pooled-table.md](pooled-table.md)).\n"
    )
