"""The MiniLM tier: all-MiniLM-L6-v2 served by qaindex (float32 and int8) against sentence-transformers.

``qaindex export-model minilm`` writes all-MiniLM-L6-v2 as an ONNX encoder; ``--quantize int8``
stores its weights as 8-bit integers (:func:`qaindex_export.exporting.onnx_graph.quantize_int8`).
For each corpus built by ``tools/corpora.py`` (every answer plus the junk answers of
``benchmarks.quality.pooled``, as the user-corpora table indexes them), in one run, three
encoders of the same model rank every answer for every question by exact cosine:

- ``sentence-transformers``: the library itself (batch 64, CPU);
- ``export-model``: the exported float32 model (``--float``), through ``Model.encode``;
- ``export-model --quantize int8``: the int8 model (``--int8``).

MRR@10 of each (:func:`benchmarks.quality.pooled_eval.eval_dense`, the pooled benchmark's
metric), and the int8 model's loss against sentence-transformers (target: at most
:data:`MRR_TARGET` on every corpus). Speed: milliseconds to encode one question with one
thread (torch for sentence-transformers, onnxruntime for qaindex; median over ``--questions``
questions of the corpora, after five untimed calls), and each as a share of
sentence-transformers' (target: at most :data:`LATENCY_TARGET`).

Writes ``benchmarks/results/minilm_tier.json`` and the ``minilm-tier`` section of
``docs/sentence-transformers.md``.

Usage::

    python -m benchmarks.speed.minilm_tier --float minilm --int8 minilm-int8 [--corpora /work/evaldata]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, markdown_table, per_call_ms, write_results
from benchmarks.quality.pooled import load_corpora, question_speed
from benchmarks.quality.pooled_eval import eval_dense, minilm_encoder, questions_and_relevant
from benchmarks.readme_markers import replace_section
from qaindex import Model

RESULTS = ROOT / "benchmarks" / "results" / "minilm_tier.json"
MRR_TARGET = 0.005  # the int8 model's MRR@10 may be at most this much below sentence-transformers'
LATENCY_TARGET = 0.5  # its per-question time at most this share of sentence-transformers'
SYSTEMS = ("sentence-transformers", "export-model", "export-model --quantize int8")


def model_encoder(directory: Path) -> Any:
    """``texts -> vectors`` of a qaindex model (the questions' and answers' encoder are one here)."""
    model = Model.load(directory, device="cpu")
    return lambda texts: model.encode(list(texts), role="answer")


def graph_bytes(directory: Path) -> int:
    """Bytes of a model directory's ONNX graphs."""
    return sum(p.stat().st_size for p in directory.iterdir() if p.suffix == ".onnx")


def minilm_question_ms(questions: list[str]) -> dict[str, float]:
    """Milliseconds for sentence-transformers to encode one question with one torch thread."""
    from benchmarks.common import minilm

    st = minilm(threads=1)
    ms = np.array(per_call_ms(lambda q: st.encode([q], normalize_embeddings=True), questions, warm=5))
    return {"median_ms": float(np.median(ms)), "mean_ms": float(ms.mean()), "questions": len(questions)}


def measure(corpora: Path, float_dir: Path, int8_dir: Path, n_questions: int) -> dict[str, Any]:
    """MRR@10 of the three encoders on every corpus, and their per-question times."""
    pools = load_corpora(corpora)
    encoders = {
        SYSTEMS[0]: minilm_encoder(),
        SYSTEMS[1]: model_encoder(float_dir),
        SYSTEMS[2]: model_encoder(int8_dir),
    }
    mrr: dict[str, dict[str, float]] = {}
    for system, encode in encoders.items():
        for corpus, metrics in eval_dense(encode, pools).items():
            mrr.setdefault(corpus, {})[system] = round(float(metrics["mrr@10"]), 4)
        print(system, {c: m[system] for c, m in mrr.items()}, flush=True)
    sample = [q for groups in pools.values() for q in questions_and_relevant(groups)[0]]
    rng = np.random.default_rng(0)
    questions = [sample[i] for i in rng.choice(len(sample), size=min(n_questions, len(sample)), replace=False)]
    speed = {
        SYSTEMS[0]: minilm_question_ms(questions),
        SYSTEMS[1]: question_speed(float_dir, questions),
        SYSTEMS[2]: question_speed(int8_dir, questions),
    }
    base = speed[SYSTEMS[0]]["median_ms"]
    for figures in speed.values():
        figures["share_of_sentence_transformers"] = round(figures["median_ms"] / base, 3)
    loss = {corpus: round(m[SYSTEMS[0]] - m[SYSTEMS[2]], 4) for corpus, m in mrr.items()}
    sizes = {name: graph_bytes(d) for name, d in ((SYSTEMS[1], float_dir), (SYSTEMS[2], int8_dir))}
    return {
        "mrr@10": mrr,
        "int8_loss": loss,
        "question_ms": speed,
        "graph_bytes": sizes,
        "targets": {
            "int8_loss_at_most": MRR_TARGET,
            "int8_loss_met": all(v <= MRR_TARGET for v in loss.values()),
            "latency_share_at_most": LATENCY_TARGET,
            "latency_met": speed[SYSTEMS[2]]["share_of_sentence_transformers"] <= LATENCY_TARGET,
        },
    }


def readme_body(results: dict[str, Any]) -> str:
    """The ``minilm-tier`` section: MRR@10 per corpus and encoder, then the per-question times."""
    rows = [
        [corpus, *(f"{m[s]:.3f}" for s in SYSTEMS), f"{results['int8_loss'][corpus]:+.3f}"]
        for corpus, m in results["mrr@10"].items()
    ]
    speed = results["question_ms"]
    sizes = results["graph_bytes"]
    times = [
        [
            s,
            f"{speed[s]['median_ms']:.2f}",
            f"{speed[s]['share_of_sentence_transformers']:.2f}×",
            f"{sizes[s] / 1e6:.0f} MB" if s in sizes else "—",
        ]
        for s in SYSTEMS
    ]
    worst = max(results["int8_loss"].values())
    return (
        "all-MiniLM-L6-v2, whole corpus, exact cosine over every answer, MRR@10; *int8 loss*: "
        "sentence-transformers' MRR@10 minus the int8 model's.\n\n"
        + markdown_table(["corpus", *SYSTEMS, "int8 loss"], rows)
        + "\n\n"
        + markdown_table(["encoder", "ms per question (1 thread)", "× sentence-transformers", "ONNX graph"], times)
        + f"\n\nThe int8 model loses at most {worst:.3f} MRR@10 (target {MRR_TARGET}: "
        + ("met" if results["targets"]["int8_loss_met"] else "missed")
        + f") and encodes a question in {speed[SYSTEMS[2]]['share_of_sentence_transformers']:.2f}× "
        f"sentence-transformers' time (target {LATENCY_TARGET}×: "
        + ("met" if results["targets"]["latency_met"] else "missed")
        + f").\n\nGenerated by `{results['run']['command']}`.\n"
    )


def main() -> None:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--corpora", type=Path, default=Path("/work/evaldata"), help="tools/corpora.py output folder")
    parser.add_argument("--float", dest="float_dir", type=Path, required=True, help="`export-model minilm --out DIR`")
    parser.add_argument("--int8", dest="int8_dir", type=Path, required=True, help="the same with `--quantize int8`")
    parser.add_argument("--questions", type=int, default=200, help="questions timed one at a time")
    args = parser.parse_args()
    results = measure(args.corpora, args.float_dir, args.int8_dir, args.questions)
    path = write_results(args.out, results, run=True, indent=1, ensure_ascii=False)
    print(readme_body(json.loads(path.read_text(encoding="utf-8"))))
    if Path(args.out) == RESULTS:
        replace_section("minilm-tier", readme_body(json.loads(path.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()
