"""Benchmarks: each module is one measurement, run from the repository root as ``python -m benchmarks.NAME``.

They print their figures and write a results file under ``benchmarks/results/`` (and, where a
README or docs table is generated from it, rewrite that section). Shared helpers (paths,
writing results, timing, MiniLM loading, synthetic corpora) are in :mod:`benchmarks.common`;
the README/docs section markers in :mod:`benchmarks.readme_markers`. See ``docs/architecture.md``
for the list.
"""
