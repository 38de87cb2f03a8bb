"""The papers' tables reproduced (:mod:`~benchmarks.reproduction.reproduce`) and the studies around
them: ``python -m benchmarks.reproduction.NAME``."""
