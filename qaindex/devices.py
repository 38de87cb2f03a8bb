"""Device choice for onnxruntime sessions and FAISS indexes.

``auto`` uses CUDA when it really works: onnxruntime's CUDA provider is kept only if the
session actually got it (``session.get_providers()``; onnxruntime-gpu lists the provider on
machines without a GPU and silently falls back), and FAISS GPU indexes only if
``faiss.get_num_gpus() > 0``. ``cuda`` fails with a clear error when it cannot be used.
``cpu`` never touches a GPU.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import DeviceError, MissingDependencyError

__all__ = ["DEVICES", "check_device", "create_session", "faiss_gpu_count", "import_faiss", "import_onnxruntime"]

DEVICES = ("auto", "cpu", "cuda")
_INSTALL_HINT = (
    "install the CPU runtime with `pip install 'qaindex[cpu]'` (or the GPU one with `pip install 'qaindex[gpu]'`)"
)


def check_device(device: str) -> str:
    """Validate a device name.

    Example
    -------
    >>> check_device("auto")
    'auto'
    """
    if device not in DEVICES:
        raise DeviceError(f"unknown device {device!r}; choose one of: {', '.join(DEVICES)}")
    return device


def import_onnxruntime() -> Any:
    """Import onnxruntime, or say which extra to install."""
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError(f"onnxruntime is not installed; {_INSTALL_HINT}") from None
    return onnxruntime


def import_faiss() -> Any:
    """Import faiss, or say which extra to install."""
    try:
        import faiss
    except ImportError:
        raise MissingDependencyError(f"faiss is not installed; {_INSTALL_HINT}") from None
    return faiss


def faiss_gpu_count() -> int:
    """Number of GPUs FAISS can use (0 with faiss-cpu, or faiss-gpu on a CPU-only machine)."""
    faiss = import_faiss()
    get = getattr(faiss, "get_num_gpus", None)
    if get is None:
        return 0
    try:
        return int(get())
    except Exception:  # noqa: BLE001 - a broken CUDA install must not break CPU use
        return 0


def create_session(path: str | os.PathLike[str], *, device: str = "auto", threads: int | None = None) -> Any:
    """Open an onnxruntime session on the requested device.

    Parameters
    ----------
    path : path-like
        The ONNX graph.
    device : {"auto", "cpu", "cuda"}, keyword-only
    threads : int, optional
        ``intra_op_num_threads``; None lets onnxruntime decide (all cores).

    Returns
    -------
    onnxruntime.InferenceSession
        ``session.get_providers()[0]`` is the provider actually used.
    """
    ort = import_onnxruntime()
    check_device(device)
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = int(threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    available = ort.get_available_providers()
    if device == "cpu" or "CUDAExecutionProvider" not in available:
        if device == "cuda":
            raise DeviceError(
                "device 'cuda' was requested but onnxruntime has no CUDAExecutionProvider "
                f"(available providers: {', '.join(available)}); install onnxruntime-gpu "
                "(`pip install 'qaindex[gpu]'`) or use --device cpu"
            )
        return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
    options.log_severity_level = 3  # the CPU fallback is checked below, not logged
    session = ort.InferenceSession(
        os.fspath(path), options, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    if session.get_providers()[0] != "CUDAExecutionProvider" and device == "cuda":
        raise DeviceError(
            "device 'cuda' was requested but onnxruntime could not create a CUDA session "
            f"(it fell back to {session.get_providers()[0]}); check the CUDA and cuDNN "
            "libraries, or use --device cpu"
        )
    return session
