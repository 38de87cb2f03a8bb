"""A pytest plugin that makes this machine look like one with a working GPU.

Run the suite with it to check that no test assumes the absence of a GPU::

    PYTHONPATH=tests .venv/bin/python -m pytest -q -p helpers.fake_gpu tests

onnxruntime then lists ``CUDAExecutionProvider`` and a session that asks for it reports
CUDA as its provider (while really running on the CPU); FAISS reports one GPU and "moves"
flat indexes to it (they stay CPU indexes). This is what ``--device auto`` sees on a GPU
machine with onnxruntime-gpu and faiss-gpu installed, so every test that asserts a device
must ask for it explicitly (``device="cpu"``/``--device cpu``) or simulate it itself.
"""

from __future__ import annotations

from typing import Any

import pytest

_CUDA = "CUDAExecutionProvider"
_CPU = "CPUExecutionProvider"


class _CudaLookingSession:
    """A real CPU session that says it runs on CUDA when CUDA was asked for."""

    def __init__(self, real: Any, path: Any, options: Any = None, providers: list[str] | None = None, **kw: Any):
        self._cuda = bool(providers) and providers[0] == _CUDA  # type: ignore[index]
        self._real = real(path, options, providers=[_CPU], **kw)

    def get_providers(self) -> list[str]:
        return [_CUDA, _CPU] if self._cuda else [_CPU]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def simulate_gpu(setattr: Any = setattr) -> None:
    """Install the fakes with ``setattr`` (pass ``monkeypatch.setattr`` to undo them after a test)."""
    import faiss
    import onnxruntime

    import qaindex.devices
    import qaindex.vector_index

    real_session = onnxruntime.InferenceSession
    setattr(onnxruntime, "get_available_providers", lambda: [_CUDA, _CPU])
    setattr(onnxruntime, "InferenceSession", lambda *a, **kw: _CudaLookingSession(real_session, *a, **kw))
    setattr(qaindex.devices, "faiss_gpu_count", lambda: 1)
    setattr(qaindex.vector_index, "faiss_gpu_count", lambda: 1)
    setattr(faiss, "StandardGpuResources", lambda: object())
    setattr(faiss, "index_cpu_to_gpu", lambda resources, device, index: index)
    setattr(faiss, "index_gpu_to_cpu", lambda index: index)


def pytest_configure(config: pytest.Config) -> None:
    simulate_gpu()
