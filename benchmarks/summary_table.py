"""The README's "when to choose it" table: quality and speed of qaindex beside MiniLM and BM25.

Nothing is measured here: the table is rendered from two results files written by other
scripts, so its figures are theirs —

- quality (MRR@10 of whole-corpus retrieval, junk answers present) and answer-encoding speed
  from ``benchmarks/results/pooled.json`` (``python benchmarks/pooled.py``);
- one-question latency at 10,000 / 100,000 / 1,000,000 answers from
  ``benchmarks/results/scale.json`` (``python benchmarks/bench_scale.py``).

Usage::

    python benchmarks/summary_table.py     # rewrite the README section from the two files

``tests/test_claims.py`` checks that the README section equals what these files render.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "pooled.json"
SCALE = ROOT / "benchmarks" / "results" / "scale.json"
README_SECTION = "summary"

_QUALITY_POOLS = ("WikiQA test", "TrecQA clean test", "FAQ (examples/faq.jsonl)")
_SYSTEMS = (  # (label, name in pooled.json, latency source in scale.json)
    ("qaindex, built-in model", "current default", "qaindex"),
    ("all-MiniLM-L6-v2 + FAISS", "MiniLM exact cosine", "minilm"),
    ("BM25 (bm25s)", "BM25 (bm25s)", "bm25"),
)


def _latency(size: dict[str, Any], source: str) -> float | None:
    if source == "qaindex":  # the tuned approximate index (pq at recall 0.99), as the scale page's rows
        rows = [r for r in size["qaindex"] if r["kind"] != "flat"] or size["qaindex"]
        return float(rows[0]["single_1_thread"]["p50_ms"])
    if source == "minilm":
        return size.get("minilm", {}).get("hnsw", {}).get("p50_ms")
    return size.get("bm25", {}).get("single", {}).get("p50_ms")


def readme_body(results: dict[str, Any], scale: dict[str, Any] | None = None) -> str:
    """The table (reads ``scale.json`` beside ``pooled.json`` unless given)."""
    if scale is None:
        scale = json.loads(SCALE.read_text(encoding="utf-8"))
    sizes = scale["sizes"]
    pools = [p for p in _QUALITY_POOLS if p in results["pools"]]
    names = {"WikiQA test": "WikiQA", "TrecQA clean test": "TrecQA", "FAQ (examples/faq.jsonl)": "FAQ"}
    lines = [
        "| | "
        + " | ".join(f"{names[p]} MRR@10" for p in pools)
        + " | "
        + " | ".join(f"p50 ms, {s['answers']:,} answers" for s in sizes)
        + " | answers encoded/s |",
        "|---|" + "---:|" * (len(pools) + len(sizes) + 1),
    ]
    minilm = results["results"][next(n for _, n, src in _SYSTEMS if src == "minilm")]
    for label, prefix, source in _SYSTEMS:
        name = next(n for n in results["results"] if n.startswith(prefix))
        row = results["results"][name]
        cells = []
        for p in pools:
            ratio = "" if source == "minilm" else f" ({row[p]['mrr@10'] / minilm[p]['mrr@10']:.2f}×)"
            cells.append(f"{row[p]['mrr@10']:.3f}{ratio}")
        for size in sizes:
            ms = _latency(size, source)
            cells.append("-" if ms is None else f"{ms:.2f}")
        speed = results["speed_answers_per_second"].get(name)
        cells.append(f"{speed['1_thread']:,.0f}" if speed else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return (
        "\n".join(lines)
        + f"\n\nMRR@10 (× MiniLM's): every test question searched against every answer of its split, "
        f"{len(results['junk_answers'])} junk answers added (`python benchmarks/pooled.py`; MiniLM with exact "
        "cosine search). p50: median time of one question on 2 CPU cores, 1 thread, qaindex with its approximate "
        "index tuned to recall@10 0.99 against exact search, MiniLM with FAISS HNSW "
        "(`python benchmarks/bench_scale.py`). Answers encoded/s: indexing speed on 1 thread. Rendered by "
        "`python benchmarks/summary_table.py`.\n"
    )


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from readme_markers import replace_section

    body = readme_body(json.loads(RESULTS.read_text(encoding="utf-8")))
    if not replace_section(README_SECTION, body):
        sys.exit(f"no documentation file has the {README_SECTION} markers")
    print(body)


if __name__ == "__main__":
    main()
