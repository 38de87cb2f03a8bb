"""Helpers shared by the tests (and by the benchmarks that reuse them).

- :mod:`.onnx_models`: tiny ONNX encoders and scorers built with the ``onnx`` helper API
  (no torch), written as model directories;
- :mod:`.fake_gpu`: onnxruntime sessions that claim CUDA, for device-policy tests;
- :mod:`.trained`: the one fixture factory for trained and exported models (torch).

Tests import them as ``helpers.X`` (``tests/`` is on pytest's path); the benchmarks, run from
the repository root, as ``tests.helpers.X``.
"""
