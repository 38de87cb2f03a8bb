"""Device choice for onnxruntime sessions and FAISS indexes.

``auto`` uses CUDA where it pays and when it really works: onnxruntime's CUDA provider is
kept only if the session actually got it (``session.get_providers()``; onnxruntime-gpu lists
the provider on machines without a GPU and silently falls back), and FAISS GPU indexes only
if ``faiss.get_num_gpus() > 0``. ``cuda`` fails with a clear error when it cannot be used.
``cpu`` never touches a GPU.

Where it pays (:class:`SessionPair`): under ``auto`` each ONNX graph keeps a CPU session for
single questions and small batches and, when CUDA works, a CUDA session for calls of
:data:`GPU_MIN_BATCH` rows or more (bulk answer encoding at build time, large question
batches): for one question the transfer and kernel launches cost more than the tiny encoder,
while bulk encoding gains from the GPU (the measurements: ``docs/devices.md``). ``cuda`` puts
every call on CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .checks import shown
from .errors import DeviceError, MissingDependencyError, ModelFormatError

__all__ = [
    "DEVICES",
    "GPU_MIN_BATCH",
    "SessionPair",
    "check_device",
    "create_session",
    "devices_info",
    "devices_line",
    "faiss_gpu_count",
    "faiss_reason",
    "import_faiss",
    "import_onnxruntime",
    "open_sessions",
    "run_graph",
]

DEVICES = ("auto", "cpu", "cuda")
GPU_MIN_BATCH = 64  # rows per call from which ``auto`` runs a graph on CUDA (when CUDA works)
_CUDA = "CUDAExecutionProvider"
_CPU = "CPUExecutionProvider"
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
    if not isinstance(device, str) or device not in DEVICES:
        raise DeviceError(f"unknown device {shown(device)}; choose one of: {', '.join(DEVICES)}")
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


@dataclass(frozen=True)
class SessionPair:
    """The sessions of one ONNX graph: ``small`` below ``bulk_from`` rows per call, ``bulk`` from it.

    ``small`` and ``bulk`` are the same session when there is one device only. ``why`` says
    in words why the graph runs where it does (shown by ``qaindex info``).

    Example
    -------
    >>> pair = SessionPair("cpu-session", "gpu-session", 64, "why")
    >>> pair.for_rows(1), pair.for_rows(64)
    ('cpu-session', 'gpu-session')
    """

    small: Any
    bulk: Any
    bulk_from: int
    why: str

    def for_rows(self, rows: int) -> Any:
        """The session for a call with ``rows`` rows (texts to encode, or questions to score)."""
        return self.bulk if rows >= self.bulk_from else self.small


def run_graph(session: Any, outputs: list[str] | None, feeds: dict[str, Any], where: object) -> list[Any]:
    """``session.run(outputs, feeds)``; a graph that fails to run is the model's fault.

    onnxruntime raises its own exception types (a node that cannot run on these inputs, an
    allocation a hostile graph asks for, ...): each becomes a :class:`~qaindex.ModelFormatError`
    naming ``where`` (the graph file), with onnxruntime's first line of explanation.

    Example
    -------
    >>> pair = open_sessions(model.directory / "encoder.onnx", device="cpu")
    >>> run_graph(pair.small, None, {}, "encoder.onnx")
    Traceback (most recent call last):
    ...
    qaindex.errors.ModelFormatError: encoder.onnx: onnxruntime failed to run this graph (...); ...
    """
    try:
        return list(session.run(outputs, feeds))
    except Exception as exc:  # onnxruntime raises its own exception types
        lines = str(exc).strip().splitlines()
        why = lines[0][:300] if lines else type(exc).__name__
        raise ModelFormatError(
            f"{where}: onnxruntime failed to run this graph ({why}); the model is broken, re-export it"
        ) from exc


def open_sessions(
    path: str | os.PathLike[str],
    *,
    device: str = "auto",
    threads: int | None = None,
    bulk_from: int = GPU_MIN_BATCH,
) -> SessionPair:
    """Open the session(s) of one graph under the device policy (see the module docstring).

    Parameters
    ----------
    path : path-like
        The ONNX graph.
    device : {"auto", "cpu", "cuda"}, keyword-only
        ``auto``: CPU below ``bulk_from`` rows per call, CUDA from it when CUDA really works
        (two sessions); ``cpu``: CPU only; ``cuda``: CUDA only (an error if it cannot be used).
    threads : int, optional
        ``intra_op_num_threads`` of the CPU session.
    bulk_from : int, keyword-only
        Rows per call from which ``auto`` uses the CUDA session.

    Returns
    -------
    SessionPair

    Example
    -------
    >>> pair = open_sessions(model.directory / "encoder.onnx", device="cpu")
    >>> pair.small is pair.bulk, pair.small.get_providers()[0], pair.why
    (True, 'CPUExecutionProvider', '--device cpu')
    """
    check_device(device)
    if device == "cuda":
        session = create_session(path, device="cuda", threads=threads)
        return SessionPair(session, session, 0, "--device cuda: every call on CUDA")
    cpu = create_session(path, device="cpu", threads=threads)
    if device == "cpu":
        return SessionPair(cpu, cpu, bulk_from, "--device cpu")
    available = import_onnxruntime().get_available_providers()
    if _CUDA not in available:
        why = "onnxruntime has no CUDAExecutionProvider (onnxruntime-gpu is not installed): every call on the CPU"
        return SessionPair(cpu, cpu, bulk_from, why)
    gpu = create_session(path, device="auto", threads=threads)
    if gpu.get_providers()[0] != _CUDA:
        why = (
            "onnxruntime-gpu could not create a CUDA session (no usable GPU, or missing CUDA/cuDNN "
            "libraries): every call on the CPU"
        )
        return SessionPair(cpu, cpu, bulk_from, why)
    why = (
        f"calls of {bulk_from}+ rows (bulk answer encoding, large batches) on CUDA, smaller ones "
        "(single questions) on the CPU, where they are faster"
    )
    return SessionPair(cpu, gpu, bulk_from, why)


def faiss_reason(device: str, kind: str) -> str:
    """Why a FAISS coarse index of ``kind`` runs on ``device`` (``"cpu"`` or ``"cuda"``).

    Example
    -------
    >>> faiss_reason("cpu", "hnsw")
    'FAISS has no GPU version of the hnsw index'
    """
    if device == "cuda":
        return "flat index on the GPU (faiss-gpu sees a GPU)"
    if kind != "flat":
        return f"FAISS has no GPU version of the {kind} index"
    if faiss_gpu_count() == 0:
        return "FAISS sees no GPU (faiss-cpu, or no usable GPU)"
    return "--device cpu"


def devices_info(model: Any, faiss_device: str, faiss_kind: str) -> dict[str, Any]:
    """The ``devices`` entry of ``Ranker.info()``: what each stage runs on, and why.

    ``onnxruntime`` maps each graph to its provider for single questions and small batches,
    ``onnxruntime_bulk`` for calls of ``bulk_from`` rows or more (answer encoding at build
    time, large batches); ``why`` gives the reasons.
    """
    policy = model.device_policy
    return {
        "onnxruntime": model.providers,
        "onnxruntime_bulk": model.bulk_providers,
        "bulk_from": policy["bulk_from"],
        "faiss": faiss_device,
        "why": {"onnxruntime": policy["why"], "faiss": faiss_reason(faiss_device, faiss_kind)},
    }


def devices_line(devices: dict[str, Any]) -> str:
    """One line for ``qaindex build``/``info``: where small and bulk calls and FAISS run.

    Example
    -------
    >>> devices_line({"onnxruntime": {"scorer": "CPUExecutionProvider"}, "faiss": "cpu",
    ...               "onnxruntime_bulk": {"scorer": "CUDAExecutionProvider"}, "bulk_from": 64})
    'onnxruntime on CPUExecutionProvider (CUDAExecutionProvider for calls of 64+ rows), faiss on cpu'
    """
    small = "/".join(sorted(set(devices["onnxruntime"].values())))
    bulk = "/".join(sorted(set(devices.get("onnxruntime_bulk", devices["onnxruntime"]).values())))
    where = small if bulk == small else f"{small} ({bulk} for calls of {devices['bulk_from']}+ rows)"
    return f"onnxruntime on {where}, faiss on {devices['faiss']}"
