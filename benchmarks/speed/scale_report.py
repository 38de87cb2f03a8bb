"""The tables and targets of ``benchmarks/speed/scale.py``: ``docs/scale.md``, the ``scale``
section of ``docs/performance.md`` and each target met or missed, from its results file."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.common import ROOT, read_sweep, sweeps_path
from benchmarks.speed import large
from qaindex.vector_index import AUTO_FLAT_MAX

TARGETS = {
    "p50_ms_10k": 0.5,
    "p50_ms_100k": 0.7,
    "p50_ms_1m": 1.0,
    "p50_ms_1m_hybrid": 1.5,
    "recall": 0.99,
    "vs_minilm": 20.0,
    "build_per_s": 50_000.0,
    "disk_ratio": 1.5,
}


def minilm_hnsw(measured: dict[str, Any]) -> dict[str, Any]:
    """MiniLM + HNSW's timing at equal recall (``hnsw_equal_recall``), or at ef 128 in older results."""
    return measured.get("hnsw_equal_recall") or measured["hnsw"]  # type: ignore[no-any-return]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each performance target with its figure and met / missed / not measured (kept in the results file)."""
    sizes = results["sizes"]
    largest = sizes[-1] if sizes else None
    out: list[dict[str, Any]] = []

    def main_row(size: dict[str, Any]) -> dict[str, Any]:
        return size["qaindex"][0]

    for answers, key in ((10_000, "p50_ms_10k"), (100_000, "p50_ms_100k")):
        size = next((s for s in sizes if s["answers"] == answers), None)
        if size is not None:
            r = main_row(size)
            p50, rec = dense_p50(r), r["recall_at_10"]
            out.append(
                {
                    "target": f"{answers:,} answers: dense p50 <= {TARGETS[key]} ms (1 thread), recall@10 >= 0.99",
                    "figure": f"p50 {p50:.3f} ms, recall@10 {rec:.4f} ({r['kind']})",
                    "met": bool(p50 <= TARGETS[key] and rec >= TARGETS["recall"]),
                }
            )
    million = next((s for s in sizes if s["answers"] >= 1_000_000), None)
    if million is not None:
        r = main_row(million)
        p50, rec = dense_p50(r), r["recall_at_10"]
        out.append(
            {
                "target": "1M answers: p50 <= 1 ms (1 thread), recall@10 >= 0.99",
                "figure": f"p50 {p50:.3f} ms, recall@10 {rec:.4f} ({r['kind']})",
                "met": bool(p50 <= TARGETS["p50_ms_1m"] and rec >= TARGETS["recall"]),
            }
        )
        if r.get("hybrid"):
            hp50 = r["single_1_thread"]["p50_ms"]
            out.append(
                {
                    "target": "1M answers, hybrid search: p50 <= 1.5 ms (1 thread)",
                    "figure": f"p50 {hp50:.3f} ms ({r['kind']}, BM25 fused)",
                    "met": bool(hp50 <= TARGETS["p50_ms_1m_hybrid"]),
                }
            )
    elif largest is not None:
        r = main_row(largest)
        out.append(
            {
                "target": "1M answers: p50 <= 1 ms (1 thread), recall@10 >= 0.99",
                "figure": f"1M not measured in this run; at {largest['answers']:,}: p50 "
                f"{r['single_1_thread']['p50_ms']:.3f} ms, recall@10 {r['recall_at_10']:.4f} ({r['kind']})",
                "met": None,
            }
        )
    for size in sizes:
        r = main_row(size)
        for other in size["qaindex"][1:]:
            if "minilm" in size:
                ratio = minilm_hnsw(size["minilm"])["p50_ms"] / other["single_1_thread"]["p50_ms"]
                out.append(
                    {
                        "target": f">= 20x lower p50 than MiniLM + FAISS HNSW ({size['answers']:,} answers, "
                        f"{other['kind']})",
                        "figure": f"{ratio:.1f}x, recall@10 {other['recall_at_10']:.4f}",
                        "met": bool(ratio >= TARGETS["vs_minilm"]),
                    }
                )
            out.append(
                {
                    "target": f"index on disk <= 1.5x float32 vectors + text ({size['answers']:,} answers, "
                    f"{other['kind']})",
                    "figure": f"{other['disk_ratio']:.2f}x ({other['disk_ratio_without_model']:.2f}x without the "
                    "model copy)",
                    "met": bool(other["disk_ratio"] <= TARGETS["disk_ratio"]),
                }
            )
        if "minilm" in size:
            hnsw = minilm_hnsw(size["minilm"])
            ratio = hnsw["p50_ms"] / r["single_1_thread"]["p50_ms"]
            at = f"ef {hnsw['ef']}, recall@10 {hnsw['recall_with_ties']:.4f} with ties" if "ef" in hnsw else "ef 128"
            out.append(
                {
                    "target": f">= 20x lower p50 than MiniLM + FAISS HNSW at equal recall "
                    f"({size['answers']:,} answers)",
                    "figure": f"{ratio:.1f}x ({hnsw['p50_ms']:.2f} ms, {at}, "
                    f"vs {r['single_1_thread']['p50_ms']:.3f} ms)",
                    "met": bool(ratio >= TARGETS["vs_minilm"]),
                }
            )
        out.append(
            {
                "target": f"build >= 50,000 answers/s ({size['answers']:,} answers, {r['kind']})",
                "figure": f"{r['build_answers_per_s']:,.0f} answers/s",
                "met": bool(r["build_answers_per_s"] >= TARGETS["build_per_s"]),
            }
        )
        out.append(
            {
                "target": f"index on disk <= 1.5x float32 vectors + text ({size['answers']:,} answers, {r['kind']})",
                "figure": f"{r['disk_ratio']:.2f}x ({r['disk_bytes'] / 1e6:,.1f} MB vs {r['raw_bytes'] / 1e6:,.1f} MB; "
                f"{r['disk_ratio_without_model']:.2f}x without the {r['model_copy_bytes'] / 1e6:.1f} MB model copy)",
                "met": bool(r["disk_ratio"] <= TARGETS["disk_ratio"]),
            }
        )
    return out


def dense_p50(r: dict[str, Any]) -> float:
    """p50 (ms, 1 thread) of a dense search: the default search when the index has no BM25 index."""
    return float(r.get("single_1_thread_dense", r["single_1_thread"])["p50_ms"])


def difficulty_lines(d: dict[str, Any] | None, *, contrast: bool = True) -> list[str]:
    """A paragraph from ``benchmarks/speed/ann_difficulty.py``'s results: each coarse stage's cost
    at recall 0.99 (after the vectors' contrast unless ``contrast`` is False), and the routed
    inverted lists when the run compared them."""
    if d is None:
        return []
    c = d["contrast"]
    qa = c["question_to_answer_cosine"]
    parts = []
    for kind, cur in d["curves"].items():
        best, hit = _at_target(cur["rows"], lambda r: r["recall_at_10"])
        verb = "reaches" if hit else "peaks at"
        where = "" if kind == "flat" else f" at breadth {best['breadth']:,}"
        built = f" (built in {cur['build_s']:,.0f} s)" if kind.startswith("hnsw:") else ""
        parts.append(f"{kind} {verb} {best['recall_at_10']:.4f}{where} in {best['p50_ms']:.2f} ms{built}")
    head = (
        f"Coarse stages compared (`benchmarks/speed/ann_difficulty.py`, model `{d.get('model', 'built-in')}`, "
        f"{d['answers']:,} answers, {d['questions']} questions, coarse stage alone, 1 thread)"
    )
    if contrast:
        head += (
            f": the answers' mean unit vector has length {c['mean_direction_length']:.2f} (1: every answer points "
            f"one way; 0: no shared direction); a question's best answer has cosine {qa['1st']:.3f}, its 10th "
            f"{qa['10th']:.3f}, the median answer {qa['median']:.3f}; an answer's nearest other answer "
            f"{c['answer_to_answer_cosine']['1st']:.3f}. "
        )
    else:
        head += (
            " with other settings (`hnsw:M`: M links per node, 32 above; `pq:C`: C coordinates per "
            "sub-quantiser, 4 above). "
        )
    text = (
        head
        + "The smallest breadth of each kind that reaches recall@10 0.99 against exact search (or its best): "
        + "; ".join(parts)
        + f" (load average {d['load_average_before'][0]:.1f} before, {d['load_average_after'][0]:.1f} after)."
    )
    if "routing" in d:
        text += " " + routing_sentence(d["routing"])
    queries = query_sets_sentence(d)
    return ["", text] + (["", queries] if queries else [])


def _at_target(rows: list[dict[str, Any]], recall: Any) -> tuple[dict[str, Any], bool]:
    """The first row of a curve whose ``recall(row)`` reaches 0.99, else its best; and whether it reached it."""
    hit = next((r for r in rows if recall(r) >= 0.99), None)
    return (hit, True) if hit is not None else (max(rows, key=recall), False)


def _first_at(rows: list[dict[str, Any]], recall: Any) -> str:
    """Where a curve first reaches 0.99 (``recall(row)``), or its best."""
    row, hit = _at_target(rows, recall)
    return f"0.99 at breadth {row['breadth']:,}" if hit else f"only {recall(row):.3f} (breadth {row['breadth']:,})"


def query_sets_sentence(d: dict[str, Any]) -> str:
    """Where each curve of a ``--query-sets`` run reaches recall@10 0.99 for each set of queries."""
    parts = []
    for kind, cur in d["curves"].items():
        rows = cur["rows"]
        if "recall_by_queries" not in rows[0]:
            continue
        found = [f"the measured questions {_first_at(rows, lambda r: r['recall_at_10'])}"]
        for name in rows[0]["recall_by_queries"]:
            found.append(f"{name} {_first_at(rows, lambda r, n=name: r['recall_by_queries'][n])}")
        parts.append(f"{kind}: " + ", ".join(found))
    if not parts:
        return ""
    return (
        "The same curves for other queries (recall only; the pseudo-questions are cut from answers, "
        "that answer left out of their truth, as a build-time tuning cuts them): " + "; ".join(parts) + "."
    )


def routing_sentence(r: dict[str, Any]) -> str:
    """``ann_difficulty``'s routed inverted lists in one sentence: each scheme's recall@10 at the
    fewest lists probed that reach 0.99 (or at its widest probe) and the share of answers scanned."""
    parts = []
    for name, rows in r["schemes"].items():
        hit = next((x for x in rows if x["recall_at_10"] >= 0.99), None)
        row = hit or rows[-1]
        verb = "reach" if hit else "reach only"
        parts.append(
            f"{name} {verb} {row['recall_at_10']:.3f} probing {row['probe']:,} lists "
            f"({row['scanned']:.1%} of the answers scanned)"
        )
    return (
        f"Inverted lists of {r['lists']:,} lists, every answer of the probed lists scored exactly (routed by "
        f"{r['pseudo_questions']:,} pseudo-questions where the lists are the questions'): " + "; ".join(parts) + "."
    )


def readme_body(results: dict[str, Any]) -> str:
    """The ``scale`` section of docs/performance.md: one row per size (the targets stay in the results file)."""
    lines = [
        "| answers | qaindex (kind, breadth) | p50 ms 1 thread | p50 ms 2 threads | recall@10 | FAISS flat p50 ms "
        "| MiniLM + HNSW p50 ms (equal recall) | bm25s p50 ms | × vs MiniLM | build answers/s | disk × |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in results["sizes"]:
        r = size["qaindex"][-1] if size["answers"] <= AUTO_FLAT_MAX and len(size["qaindex"]) > 1 else size["qaindex"][0]
        flat = size.get("no_index") or next((x for x in size["qaindex"] if x["kind"] == "flat"), None)
        tuning = r.get("tuning") or {}
        breadth = f", {tuning['param']} {tuning['value']}" if tuning.get("param") else ""
        minilm = minilm_hnsw(size["minilm"])["p50_ms"] if "minilm" in size else None
        bm25 = size.get("bm25", {}).get("single", {}).get("p50_ms")
        p50 = r["single_1_thread"]["p50_ms"]

        def cell(value: float | None, fmt: str) -> str:
            return "-" if value is None else format(value, fmt)

        cells = [
            f"{size['answers']:,}",
            f"{r['kind']}{breadth}",
            f"{p50:.3f}",
            f"{r['single_2_threads']['p50_ms']:.3f}",
            f"{r['recall_at_10']:.4f}",
            cell(flat["single_1_thread"]["p50_ms"] if flat else None, ".2f"),
            cell(minilm, ".2f"),
            cell(bm25, ".2f"),
            cell(minilm / p50 if minilm is not None else None, ".1f") + ("×" if minilm is not None else ""),
            f"{r['build_answers_per_s']:,.0f}",
            f"{r['disk_ratio']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    loads = [x for s in results["sizes"] for x in (s["load_average_before"][0], s["load_average_after"][0])] + [
        r["load_average_before"][0] for s in results["sizes"] for r in s["qaindex"] if "load_average_before" in r
    ]
    lines += [
        "",
        f"Generated by `{results['command']}` (load average {min(loads):.1f}–{max(loads):.1f}; at 10,000 "
        "answers the row is `pq`, `auto` being `flat` there). MiniLM + HNSW is timed at the efSearch whose "
        "recall@10 against its flat search reaches 0.99, answers tied with the 10th counted.",
    ]
    return "\n".join(lines) + "\n"


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Performance at scale",
        "",
        f"Generated by `{results['command']}` on {results['machine']['platform']} "
        f"({results['machine']['cpus']} CPUs), model `{results['model']}`. Real WikiQA + TrecQA sentences "
        "(beyond 76,693: two joined), 1 question at a time unless stated; recall@10 of the whole pipeline "
        "against float64 brute force under the model's ranking rule. Times are on a shared machine: see the "
        "load averages.",
        "",
        "## qaindex",
        "",
        "The default search fuses BM25 wherever the index has a lexical index (PyStemmer installed): "
        "*p50* is that search, *dense p50* the same index searched with `hybrid=False`. *First search* "
        "is the first question after loading, which "
        + (
            "reads the BM25 postings the save stored; the searches timed after it start once every byte "
            "is verified (a default load verifies what a search reads, and the rest in the background "
            "within seconds)."
            if all(r.get("postings_stored") for size in results["sizes"] for r in size["qaindex"])
            else "derives the BM25 postings (the index was saved without them)."
        ),
        "",
        "| answers | index (tuned) | recall@10 | p50 ms 1 thr | dense p50 ms | p99 ms 1 thr | p50 ms 2 thr | "
        "batch q/s | build answers/s | disk MB (× raw) | load ms verified / not | first search s | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in results["sizes"]:
        for r in size["qaindex"] + ([size["no_index"]] if "no_index" in size else []):
            t = r.get("tuning") or {}
            tuned = f" {t['param']}={t['value']}" if t.get("param") else ""
            name = f"{r['kind']}{tuned}" + (" (no index)" if r is size.get("no_index") else "")
            first = r.get("first_search_s")
            load = r.get("load_average_before", size["load_average_before"])[0]  # the row's own, where kept
            lines.append(
                f"| {size['answers']:,} | {name} | {r['recall_at_10']:.4f} | {r['single_1_thread']['p50_ms']:.3f} | "
                f"{dense_p50(r):.3f} | {r['single_1_thread']['p99_ms']:.3f} | {r['single_2_threads']['p50_ms']:.3f} | "
                f"{r['batch_questions_per_s_2_threads']:,.0f} | {r['build_answers_per_s']:,.0f} | "
                f"{r['disk_bytes'] / 1e6:,.1f} ({r['disk_ratio']:.2f}×) | "
                f"{r['load_verify_s'] * 1e3:.0f} / {r['load_no_verify_s'] * 1e3:.0f} | "
                f"{'-' if first is None else format(first, '.2f')} | {load:.1f} |"
            )
    lines += [
        "",
        "Split of one question (medians, ms, 1 thread): tokenize / encode / coarse / rerank / records.",
        "",
        "| answers | index | tokenize | encode | coarse | rerank | records |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in results["sizes"]:
        for r in size["qaindex"] + ([size["no_index"]] if "no_index" in size else []):
            s = r["split_1_thread_ms"]
            lines.append(
                f"| {size['answers']:,} | {r['kind']} | {s['tokenize']:.3f} | {s['encode']:.3f} | "
                f"{s['coarse']:.3f} | {s['rerank']:.3f} | {s['records']:.3f} |"
            )
    lines += [
        "",
        "## Side by side (same corpus, same questions, same run)",
        "",
        "| answers | system | p50 ms | p99 ms | × qaindex p50 | recall@10 | build |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in results["sizes"]:
        q = size["qaindex"][0]
        qp50 = q["single_1_thread"]["p50_ms"]

        def row(system: str, timing: dict[str, float], recall: str, build: str, answers: int = size["answers"],
                qp50: float = qp50) -> str:  # fmt: skip
            p50 = timing["p50_ms"]
            ratio = f"{p50 / qp50:.1f}×"
            return f"| {answers:,} | {system} | {p50:.3f} | {timing['p99_ms']:.3f} | {ratio} | {recall} | {build} |"

        lines.append(
            row(f"qaindex {q['kind']}", q["single_1_thread"], f"{q['recall_at_10']:.4f} vs exact",
                f"{q['build_answers_per_s']:,.0f} answers/s")
        )  # fmt: skip
        if "no_index" in size:
            r = size["no_index"]
            lines.append(
                row("qaindex + FAISS IndexFlat (no index)", r["single_1_thread"], f"{r['recall_at_10']:.4f} vs exact",
                    f"{r['build_answers_per_s']:,.0f} answers/s")
            )  # fmt: skip
        if "minilm" in size:
            m = size["minilm"]
            for name, key, rec in (
                ("IndexFlatIP", "flat", "1 (exact)"),
                ("IndexHNSWFlat ef 128", "hnsw", f"{m['hnsw_recall_at_10_vs_flat']:.4f} vs flat"),
            ):
                build = f"encode {m['encode_answers_per_s']:,.0f} answers/s + index {m[key + '_index_s']:.1f} s"
                lines.append(row(f"MiniLM + FAISS {name}", m[key], rec, build))
            eq = m.get("hnsw_equal_recall")
            if eq is not None:
                build = f"encode {m['encode_answers_per_s']:,.0f} answers/s + index {m['hnsw_index_s']:.1f} s"
                rec = f"{eq['recall_with_ties']:.4f} vs flat, ties counted"
                how = "equal recall" if eq["reached"] else "the highest tried: recall below 0.99"
                lines.append(row(f"MiniLM + FAISS IndexHNSWFlat ef {eq['ef']} ({how})", eq, rec, build))
        if "bm25" in size:
            b = size["bm25"]
            lines.append(row("bm25s", b["single"], "-", f"{b['index_answers_per_s']:,.0f} answers/s"))
    batches = [
        f"{s['answers']:,} answers: qaindex {s['qaindex'][0]['batch_questions_per_s_2_threads']:,.0f}, MiniLM + "
        f"HNSW {s['minilm']['batch_questions_per_s_2_threads']:,.0f}"
        for s in results["sizes"]
        if "batch_questions_per_s_2_threads" in s.get("minilm", {})
    ]
    if batches:
        lines += [
            "",
            "Batch throughput, questions/s with 2 threads (qaindex `search_batch` of every question; MiniLM "
            "encoding them in one call, then one FAISS HNSW search): " + "; ".join(batches) + ".",
        ]
    difficulty = ROOT / "benchmarks" / "results" / "ann_difficulty.json"  # and its 1,000,000-answer variant
    for d in (
        json.loads(difficulty.read_text()) if difficulty.exists() else None,
        read_sweep(sweeps_path(difficulty), "1m"),
    ):
        lines += difficulty_lines(d)
    lines += difficulty_lines(read_sweep(sweeps_path(difficulty), "1m-links"), contrast=False)
    lines += [
        "",
        "MiniLM answer vectors beyond its pool of encoded real sentences are normalised means of pool "
        "vectors (see `benchmarks/speed/scale.py`): this changes MiniLM's recall, not its timing. Its "
        "latency includes encoding the question (median "
        + ", ".join(
            f"{s['minilm']['encode_question']['p50_ms']:.1f} ms at {s['answers']:,}"
            for s in results["sizes"]
            if "minilm" in s
        )
        + ").",
        "",
    ]
    return "\n".join(lines + large_lines())


def large_lines() -> list[str]:
    """The ten-million section: ``benchmarks.speed.large``'s table between its markers (it
    rewrites them after each of its runs), so a run of this benchmark keeps it."""
    body = large.readme_body(json.loads(large.RESULTS.read_text())) if large.RESULTS.exists() else "Not measured yet."
    return [
        "## Ten million answers on one machine",
        "",
        "A corpus file built as a user builds it (`qaindex build corpus.jsonl --recall 0.99`, the default "
        "`auto` index, in a child process), then loaded and searched in one process with 1 thread "
        "(`python -m benchmarks.speed.large`; the answers as above). Memory is *anonymous* (the heap: what "
        "the machine must hold) and *resident* (that plus the pages of the index files mapped into memory, "
        "which the kernel drops and reads back as it needs the room); a build's is its processes' together "
        "(the building one and its BM25 analysis's). Recall@10 is the dense pipeline's "
        "against exact float64 search over every stored vector.",
        "",
        "<!-- large:start -->",
        body,
        "<!-- large:end -->",
        "",
    ]
