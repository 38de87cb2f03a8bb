"""The README's reliability figures, rendered from the results of three scripts.

- ``tests/robustness/reliability.py`` → ``results/reliability.json``: kill loop, concurrent writers,
  corruption matrix;
- ``tests/robustness/fuzz.py`` → ``results/fuzz.json``: hypothesis fuzz of the API and the CLI;
- ``benchmarks/speed/load.py`` → ``results/load.json``: load time with and without checksums.

Usage::

    python -m tests.robustness.reliability_report        # rewrite the README section from the results

``tests/docs/test_claims.py`` checks that the README section equals what these files render.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks.common import ROOT
from benchmarks.readme_markers import replace_section

RESULTS = ROOT / "benchmarks" / "results" / "reliability.json"
FUZZ = ROOT / "benchmarks" / "results" / "fuzz.json"
LOAD = ROOT / "benchmarks" / "results" / "load.json"
README_SECTION = "reliability"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def readme_body(results: dict[str, Any]) -> str:
    """The README's reliability table (reads fuzz.json and load.json beside ``results``)."""
    fuzz = json.loads(FUZZ.read_text(encoding="utf-8"))
    load = json.loads(LOAD.read_text(encoding="utf-8"))
    kills = results["kill_loop"]
    writers = results["concurrent_writers"]
    corruption = results["corruption"]
    hostile = results.get("hostile_files")
    cli = fuzz["cli"]
    rows = [
        "| what was tried | runs | result |",
        "|---|---|---|",
        *(
            f"| SIGKILL at a random moment of `{op}` | {k['kills']:,} | {k['broken']} broken, {k['mixed']} mixed "
            f"(old or new content, never both); leftovers removed by the next save |"
            for op, k in kills.items()
        ),
        f"| two `qaindex add` at once on one index | {writers['runs']} | {writers['lost_updates']} lost updates, "
        f"{writers['broken']} broken, {writers['failed_commands']} failed commands, "
        f"{writers['tracebacks']} tracebacks |",
        *(
            f"| corrupted file (flip, truncate, append, delete, symlink out) × every file, {size} index "
            f"(largest file {_size(c['largest_bytes'])}) | {c['cases']} | {c['detected']} detected by the "
            f"default load{' or the first read of the damaged bytes' if 'detected_on_read' in c else ''}, "
            f"{len(c['non_qaindex_errors'])} errors other than `QAIndexError` |"
            for size, c in corruption.items()
        ),
        *(
            [
                f"| hostile files, checksums recomputed ({hostile['cases']} kinds: bad offsets, records, vectors, BM25 postings, "
                f"manifest numbers, a relabelled geometry) × {_hostile_loads(hostile)}, `verify=False` search, CLI "
                f"`search`, `info`, {'`info --verify`, ' if 'refused_by_full_load' in hostile else ''}`add` | "
                f"{hostile['runs']} | {_hostile_refusals(hostile)}; {hostile['defects']} errors other "
                'than `QAIndexError`, tracebacks or "please report this bug" |',
                f"| writers (`build`, `add`, `remove`, `gc`, `save`) pointed at a user's folder with its own "
                "`manifest.json`, `data-backup/` and a folder named like a snapshot | "
                f"{hostile['foreign_folder_runs']} | all refused; the folder "
                f"{'MODIFIED' if hostile['foreign_folder_modified'] else 'untouched'} |",
            ]
            if hostile
            else []
        ),
        f"| generated API inputs (hypothesis) | {fuzz['api']['inputs']:,} | {fuzz['api']['unclean']} exceptions "
        f"other than `QAIndexError` |",
        f"| generated CLI runs (+ {cli['subprocess_runs']} real processes) | {cli['runs']:,} | {cli['unclean']} "
        f"tracebacks or exit codes other than 0/1/2 |",
    ]
    resources = fuzz.get("resources")
    if resources:
        refused = sum(1 for r in resources["requests"].values() if r["exit_code"] == 1)
        rows.append(
            f"| largest requests on {resources['answers']:,} answers ({resources['questions']} questions × "
            f"`k = 10**9`, `info --recall --sample 1e9 -k 1e9`), each in its own process | "
            f"{len(resources['requests'])} | peak memory at most {resources['max_peak_rss_mb']:,.0f} MB; "
            f"{refused} refused before any work as over the 1 GiB request budget, the rest chunked |"
        )
    sizes = "; ".join(_load_line(s, load.get("index_kind", "flat")) for s in load["sizes"])
    return (
        "\n".join(rows)
        + "\n\nLoad time, page cache warm (SHA-256 streams at "
        + f"{load['sha256_gb_per_s']} GB/s here). The default load hashes every file but the large ones (the answers' vectors, records "
        "and BM25 terms, counts and postings), which a search verifies chunk by chunk as it reads them and a "
        "background thread verifies meanwhile; "
        '`verify="lazy"` verifies them on first read only; `verify="full"` hashes every file and scans '
        f"all content now: {sizes}.\n"
        "Generated by `python -m tests.robustness.reliability`, `python -m tests.robustness.fuzz` and "
        "`python -m benchmarks.speed.load` (then `python -m tests.robustness.reliability_report`).\n"
    )


def _hostile_refusals(hostile: dict[str, Any]) -> str:
    """How the hostile cases were refused (results from before chunk checksums: by the default load)."""
    cases = hostile["cases"]
    if "refused_by_full_load" not in hostile:
        return f"{hostile['refused_by_default_load']}/{cases} refused by the default load"
    return (
        f'{hostile["refused_by_full_load"]}/{cases} refused by a full load (`verify="full"`), '
        f"{hostile['refused_by_default_load_or_first_read']}/{cases} by the default load or the first read of the "
        "damaged content (not: BM25 postings that disagree with their terms under valid checksums)"
    )


def _hostile_loads(hostile: dict[str, Any]) -> str:
    return "full load, default load and every read" if "refused_by_full_load" in hostile else "default load"


def _searches_after(s: dict[str, Any]) -> str:
    """The median of the searches right after each kind of load (results from before it: nothing)."""
    if "search_p50_ms_after_default_load" not in s:
        return ""
    return (
        f" the next {s['searches_after_load']} hybrid searches p50 {s['search_p50_ms_after_default_load']:.2f} ms "
        f'after the default load ({s["search_p50_ms_after_lazy_load"]:.2f} ms after `verify="lazy"`, '
        f"{s['search_p50_ms_after_full_load']:.2f} ms after a full load);"
    )


def _load_line(s: dict[str, Any], kind: str) -> str:
    """One size of ``benchmarks/speed/load.py``'s results."""
    kind = s.get("index_kind", kind)
    return (
        f"{s['answers']:,} answers ({s['index_bytes'] / 1e6:,.0f} MB, {kind} index): {s['load_s'] * 1e3:,.0f} ms, "
        f'then a first hybrid search of {s["first_search_s"] * 1e3:.0f} ms; `verify="full"` '
        f"{s['load_full_s'] * 1e3:,.0f} ms (content scan {s['content_checks_s'] * 1e3:,.0f} ms of it); "
        f"`verify=False` {s['load_no_verify_s'] * 1e3:,.0f} ms (first hybrid search "
        f"{s['first_search_no_verify_s'] * 1e3:.0f} ms; {s['first_search_derived_s'] * 1e3:,.0f} ms where an index "
        f"saved without BM25 postings derives them);{_searches_after(s)} resident memory after the default load "
        f"{s['rss_after_load_mib']:,.0f} MiB (full {s['rss_after_full_load_mib']:,.0f}, `verify=False` "
        f"{s['rss_after_no_verify_load_mib']:,.0f}; {s['rss_after_import_mib']:,.0f} after importing qaindex)"
    )


def main() -> None:
    body = readme_body(json.loads(RESULTS.read_text(encoding="utf-8")))
    print(body)
    if not replace_section(README_SECTION, body):
        sys.exit(f"README.md has no {README_SECTION} markers")


if __name__ == "__main__":
    main()
