"""Device choice: CUDA only when it really works, clear errors when it is demanded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from qaindex import devices
from qaindex.errors import DeviceError
from qaindex.model import Model
from qaindex.vector_index import CoarseIndex

_RealSession = onnxruntime.InferenceSession


class FallbackSession:
    """What onnxruntime-gpu does on a machine without a GPU: it silently runs on the CPU."""

    def __init__(self, path: str, options: Any, providers: list[str]) -> None:
        self.requested = providers
        self._real = _RealSession(path, options, providers=["CPUExecutionProvider"])

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture()
def gpu_build_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", FallbackSession)


def test_auto_falls_back_to_cpu_and_says_so(gpu_build_without_gpu: None, faq_model: Path) -> None:
    model = Model.load(faq_model, device="auto")
    assert set(model.providers.values()) == {"CPUExecutionProvider"}
    assert model.encode(["reset password"], role="question").shape == (1, 6)


def test_cuda_demanded_but_session_fell_back(gpu_build_without_gpu: None, faq_model: Path) -> None:
    with pytest.raises(DeviceError) as info:
        Model.load(faq_model, device="cuda")
    assert str(info.value) == (
        "device 'cuda' was requested but onnxruntime could not create a CUDA session (it fell back to "
        "CPUExecutionProvider); check the CUDA and cuDNN libraries, or use --device cpu"
    )


def test_cuda_demanded_without_cuda_provider(faq_model: Path) -> None:
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    with pytest.raises(DeviceError) as info:
        Model.load(faq_model, device="cuda")
    assert str(info.value).startswith(
        "device 'cuda' was requested but onnxruntime has no CUDAExecutionProvider (available providers: "
    )
    assert str(info.value).endswith("install onnxruntime-gpu (`pip install 'qaindex[gpu]'`) or use --device cpu")


def test_faiss_gpu_only_when_faiss_sees_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "faiss_gpu_count", lambda: 0)
    import qaindex.vector_index as vi

    monkeypatch.setattr(vi, "faiss_gpu_count", lambda: 0)
    ix = CoarseIndex("poincare", 3, "flat", device="auto")
    assert ix.device == "cpu"
    with pytest.raises(DeviceError, match=r"^device 'cuda' was requested but FAISS sees no GPU"):
        CoarseIndex("poincare", 3, "flat", device="cuda")
    ix.add(np.zeros((2, 3), np.float32))
    assert ix.search(np.zeros((1, 3), np.float32), 2).shape == (1, 2)


def test_unknown_device() -> None:
    with pytest.raises(DeviceError, match=r"^unknown device 'tpu'; choose one of: auto, cpu, cuda$"):
        devices.check_device("tpu")


def test_auto_uses_the_gpu_when_it_works(
    monkeypatch: pytest.MonkeyPatch, faq_model: Path, faq_file: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner
    from helpers.fake_gpu import simulate_gpu

    from qaindex.cli import main

    simulate_gpu(lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False))
    index = str(tmp_path / "ix")
    runner = CliRunner()
    base = ["build", str(faq_file), "--model", str(faq_model), "--index", index]
    auto = runner.invoke(main, base)
    assert auto.exit_code == 0, auto.output
    # 5 answers: fewer than GPU_MIN_BATCH rows, so the CPU session encoded them
    assert (
        "onnxruntime on CPUExecutionProvider (CUDAExecutionProvider for calls of 64+ rows), faiss on cuda"
        in auto.stdout
    )
    cpu = runner.invoke(main, [*base, "--device", "cpu", "--force"])
    assert cpu.exit_code == 0, cpu.output
    assert "onnxruntime on CPUExecutionProvider, faiss on cpu" in cpu.stdout
    info = runner.invoke(main, ["info", "--index", index, "--json"])
    assert json.loads(info.stdout)["devices"]["faiss"] == "cuda"
    info = runner.invoke(main, ["info", "--index", index, "--json", "--device", "cpu"])
    assert set(json.loads(info.stdout)["devices"]["onnxruntime"].values()) == {"CPUExecutionProvider"}


class _Recording:
    """A session wrapper that counts its ``run`` calls."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.calls = 0

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def test_auto_with_cuda_keeps_single_questions_on_the_cpu(monkeypatch: pytest.MonkeyPatch, faq_model: Path) -> None:
    from helpers.fake_gpu import simulate_gpu

    simulate_gpu(lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False))
    model = Model.load(faq_model, device="auto")
    assert set(model.providers.values()) == {"CPUExecutionProvider"}
    assert set(model.bulk_providers.values()) == {"CUDAExecutionProvider"}
    assert model.device_policy == {
        "bulk_from": devices.GPU_MIN_BATCH,
        "why": f"calls of {devices.GPU_MIN_BATCH}+ rows (bulk answer encoding, large batches) on CUDA, "
        "smaller ones (single questions) on the CPU, where they are faster",
    }
    pair = model._graphs.encoders["question"]
    small, bulk = _Recording(pair.small), _Recording(pair.bulk)
    monkeypatch.setitem(model._graphs.encoders, "question", devices.SessionPair(small, bulk, pair.bulk_from, pair.why))
    model.encode(["reset password"], role="question")
    model.encode(["reset password"] * (devices.GPU_MIN_BATCH - 1), role="question", batch_size=8)
    assert (small.calls, bulk.calls) == (1 + 8, 0)
    model.encode(["reset password"] * devices.GPU_MIN_BATCH, role="question", batch_size=8)
    assert (small.calls, bulk.calls) == (9, 8)  # every batch of a bulk call goes to CUDA
    # cuda demanded: everything on CUDA
    cuda = Model.load(faq_model, device="cuda")
    assert set(cuda.providers.values()) == set(cuda.bulk_providers.values()) == {"CUDAExecutionProvider"}
    assert cuda.device_policy == {"bulk_from": 0, "why": "--device cuda: every call on CUDA"}


def test_auto_says_why_it_fell_back(gpu_build_without_gpu: None, faq_model: Path) -> None:
    model = Model.load(faq_model, device="auto")
    assert set(model.bulk_providers.values()) == {"CPUExecutionProvider"}
    assert model.device_policy["why"] == (
        "onnxruntime-gpu could not create a CUDA session (no usable GPU, or missing CUDA/cuDNN libraries): "
        "every call on the CPU"
    )


def test_info_reports_devices_and_reasons(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from qaindex.cli import main

    index = str(tmp_path / "ix")
    runner = CliRunner()
    built = runner.invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--index", index])
    assert built.exit_code == 0, built.output
    data = json.loads(runner.invoke(main, ["info", "--index", index, "--json", "--device", "cpu"]).stdout)
    assert data["devices"] == {
        "onnxruntime": {p: "CPUExecutionProvider" for p in ("question_encoder", "answer_encoder", "scorer")},
        "onnxruntime_bulk": {p: "CPUExecutionProvider" for p in ("question_encoder", "answer_encoder", "scorer")},
        "bulk_from": devices.GPU_MIN_BATCH,
        "faiss": "cpu",
        "why": {"onnxruntime": "--device cpu", "faiss": data["devices"]["why"]["faiss"]},
    }
    expected_faiss = "--device cpu" if devices.faiss_gpu_count() else "FAISS sees no GPU (faiss-cpu, or no usable GPU)"
    assert data["devices"]["why"]["faiss"] == expected_faiss
    text = runner.invoke(main, ["info", "--index", index, "--device", "cpu"]).stdout
    assert f"            why: onnxruntime: --device cpu; faiss: {expected_faiss}\n" in text


def test_faiss_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "faiss_gpu_count", lambda: 0)
    assert devices.faiss_reason("cpu", "flat") == "FAISS sees no GPU (faiss-cpu, or no usable GPU)"
    assert devices.faiss_reason("cpu", "hnsw") == "FAISS has no GPU version of the hnsw index"
    assert devices.faiss_reason("cuda", "flat") == "flat index on the GPU (faiss-gpu sees a GPU)"
    monkeypatch.setattr(devices, "faiss_gpu_count", lambda: 1)
    assert devices.faiss_reason("cpu", "flat") == "--device cpu"
