"""Benchmarks by job, each module one study run from the repository root as ``python -m benchmarks.JOB.NAME``.

- :mod:`benchmarks.quality`: answer quality (pooled retrieval, hybrid search, trust and
  off-topic scores, filters, search keys, adaptation, geometry, long answers, baselines);
- :mod:`benchmarks.speed`: latency, build time and memory, load time, scale, request bounds,
  training seconds per epoch, coarse-index difficulty;
- :mod:`benchmarks.reproduction`: the papers' tables and the diaries around them.

Every study prints its figures and writes one results file, ``benchmarks/results/NAME.json``
(and, where a README or docs table is generated from it, rewrites that section). The harness
they share (paths, arguments, writing results, timing, tables, MiniLM loading, synthetic
corpora) is :mod:`benchmarks.common`; the README/docs section markers are
:mod:`benchmarks.readme_markers`. Data preparation lives in ``tools/``, the robustness runs
(fuzzing, kill loops, hostile files) in ``tests/robustness/``.
"""
