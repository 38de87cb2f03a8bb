"""Answer-quality studies: ``python -m benchmarks.quality.NAME``, one results file each.

:mod:`~benchmarks.quality.pooled_eval` is the pooled evaluation they share with the model
builder in ``tools/``.
"""
