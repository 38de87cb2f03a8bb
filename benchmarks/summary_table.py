"""The README's "when to choose it" table: answer quality of qaindex beside BM25 and MiniLM.

Nothing is measured here: the table is rendered from results files written by other scripts,
so its figures are theirs —

- quality (MRR@10 of whole-corpus retrieval on corpora that look like users' data, junk
  answers present) from ``benchmarks/results/user_corpora.json``
  (``python -m benchmarks.quality.pooled --corpora DIR --hybrid``);
- one-question latency at 10,000 / 100,000 / 1,000,000 answers from
  ``benchmarks/results/scale.json`` (``python -m benchmarks.speed.scale``), with the model it
  was measured with.

Usage::

    python -m benchmarks.summary_table     # rewrite the README section from the files

``tests/docs/test_claims.py`` checks that the README section equals what these files render.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks.common import ROOT
from benchmarks.readme_markers import replace_section
from benchmarks.speed.scale_report import minilm_hnsw

RESULTS = ROOT / "benchmarks" / "results" / "user_corpora.json"
SCALE = ROOT / "benchmarks" / "results" / "scale.json"
README_SECTION = "summary"

_CORPORA = {  # results label -> column heading
    "product-faq": "product FAQ",
    "stackfaq": "FAQ, paraphrased",
    "semeval-cqa": "forum",
    "aws-docs": "tech docs",
    "wikiqa": "WikiQA",
    "trecqa-clean": "TrecQA",
}
_SYSTEMS = (  # (label, prefix of the system's name in user_corpora.json)
    ("qaindex, built-in model + BM25 (default search)", "qaindex default + BM25"),
    ("qaindex, built-in model, dense only", "qaindex default ("),
    ("BM25 (bm25s, stemmed)", "bm25s"),
    ("all-MiniLM-L6-v2, exact cosine", "MiniLM"),
)


def _scale_line(scale: dict[str, Any]) -> str:
    cells = []
    for size in scale["sizes"]:
        rows = [r for r in size["qaindex"] if r["kind"] != "flat"] or size["qaindex"]
        minilm = minilm_hnsw(size["minilm"])["p50_ms"] if "minilm" in size else None
        here = f"{size['answers']:,} answers: {rows[0]['single_1_thread']['p50_ms']:.2f} ms"
        cells.append(here + (f" (MiniLM + HNSW {minilm:.1f} ms)" if minilm is not None else ""))
    return (
        "One question, the default search (hybrid where PyStemmer is installed), 1 thread, approximate index tuned "
        "to recall@10 0.99, MiniLM + HNSW searched as wide as its recall needs (at most efSearch 4,096) "
        f"(model `{scale.get('model', 'built-in')}`, `python -m benchmarks.speed.scale`): " + "; ".join(cells) + "."
    )


def readme_body(results: dict[str, Any], scale: dict[str, Any] | None = None) -> str:
    """The table (reads ``scale.json`` beside the quality results unless given)."""
    if scale is None:
        scale = json.loads(SCALE.read_text(encoding="utf-8"))
    corpora = [c for c in _CORPORA if c in results["corpora"]]
    systems = results["results"]
    minilm = systems[next(n for n in systems if n.startswith("MiniLM"))]
    lines = [
        "| MRR@10 | " + " | ".join(_CORPORA[c] for c in corpora) + " |",
        "|---|" + "---:|" * len(corpora),
    ]
    for label, prefix in _SYSTEMS:
        name = next((n for n in systems if n.startswith(prefix)), None)
        if name is None:
            continue
        row = systems[name]
        cells = []
        for c in corpora:
            ratio = "" if prefix == "MiniLM" else f" ({row[c]['mrr@10'] / minilm[c]['mrr@10']:.2f}×)"
            cells.append(f"{row[c]['mrr@10']:.3f}{ratio}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    sizes = ", ".join(f"{_CORPORA[c]} {results['corpora'][c]['answers']:,}" for c in corpora)
    return (
        "\n".join(lines) + "\n\nMRR@10 (× MiniLM's): every question searched against every answer of its corpus "
        f"({sizes} answers), "
        f"{results['corpora'][corpora[0]]['junk_answers']} junk answers added; the corpora and their sources are "
        "described in [docs/user-corpora.md](docs/user-corpora.md) (`python -m benchmarks.quality.pooled --corpora DIR "
        "--hybrid`). " + _scale_line(scale) + " Rendered by `python -m benchmarks.summary_table`.\n"
    )


def main() -> None:
    body = readme_body(json.loads(RESULTS.read_text(encoding="utf-8")))
    print(body)
    if not replace_section(README_SECTION, body):
        sys.exit(f"README.md has no {README_SECTION} markers")


if __name__ == "__main__":
    main()
