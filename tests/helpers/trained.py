"""The one fixture factory for trained and exported models, and the planted teacher task.

:func:`trained_model_fixtures` gives a test module its ``data``, ``trained`` and ``exported``
fixtures for a list of model kinds::

    data, trained, exported = trained_model_fixtures(KINDS, SMALL)

``trained`` is parametrized over the kinds (module scope: each kind trains once per module on
the planted word-group task of ``conftest.planted_data``); ``exported`` is its model directory,
written with the dev file evaluated through the runtime (``metrics.dev_onnx``).

Imports of torch and ``qaindex_export`` happen inside the fixtures, after the test module's
``pytest.importorskip("torch")``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def trained_model_fixtures(
    kinds: Sequence[str], settings: dict[str, Any], *, folder: str = "models"
) -> tuple[Any, Any, Any]:
    """``(data, trained, exported)`` module-scoped fixtures for the model ``kinds`` trained with ``settings``.

    ``settings`` are :class:`qaindex_export.config.TrainConfig` fields (``model`` comes from the
    kind); ``folder`` names the temporary folder of the exported model directories.
    """

    @pytest.fixture(scope="module")
    def data(planted_data: dict) -> dict:
        return planted_data

    @pytest.fixture(scope="module", params=list(kinds))
    def trained(request: pytest.FixtureRequest, data: dict) -> Any:
        from qaindex_export.config import TrainConfig
        from qaindex_export.training.train import train

        return train(TrainConfig(model=request.param, **settings), data["train"], data["dev"], log=None)

    @pytest.fixture(scope="module")
    def exported(trained: Any, tmp_path_factory: pytest.TempPathFactory, data: dict) -> Path:
        from qaindex_export.exporting.onnx_export import export_model

        return export_model(trained, tmp_path_factory.mktemp(folder) / trained.config.model, dev_data=data["dev"])

    return data, trained, exported


def planted_teacher_task(
    vocab: Sequence[str],
    content: Sequence[str],
    filler: Sequence[str],
    *,
    width: int,
    filler_scale: float,
    seed: int = 3,
    answers: int = 80,
) -> tuple[np.ndarray, list[str], Callable[[list[str]], np.ndarray]]:
    """A weak frozen table, answers and a teacher for training without labels.

    The table (``len(vocab)`` × ``width``, random) is dominated by the ``filler`` words (rows
    2 .. 2 + len(filler), scaled by ``filler_scale``); the teacher ignores filler and sees each
    ``content`` word as a random 8-d direction, a text being the sum of its words. Each answer
    mixes 3 content words with 6 filler words, so an untrained head ranks mostly by filler.
    """
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(len(vocab), width)).astype(np.float32)
    table[0] = 0.0
    table[2 : 2 + len(filler)] *= filler_scale
    hidden = {w: rng.normal(size=8) for w in content}
    texts = [
        " ".join(rng.permutation([*rng.choice(content, 3, replace=False), *rng.choice(filler, 6)]).tolist())
        for _ in range(answers)
    ]

    def teacher(batch: list[str]) -> np.ndarray:
        out = np.zeros((len(batch), 8))
        for i, t in enumerate(batch):
            for w in t.split():
                out[i] += hidden.get(w, 0.0)
        return out.astype(np.float32)

    return table, texts, teacher


def record_tracers(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Record which torch exporter traces each graph: ``{"dynamo": [...], "torchscript": [...]}``.

    Wraps ``qaindex_export.exporting.onnx_graph.export_graph`` (dynamo) and ``export_torchscript``; each
    entry is the traced module's class name.
    """
    from qaindex_export.exporting import onnx_graph

    seen: dict[str, list[str]] = {"dynamo": [], "torchscript": []}
    for key, name in (("dynamo", "export_graph"), ("torchscript", "export_torchscript")):
        real = getattr(onnx_graph, name)

        def spy(module: Any, *args: Any, _real: Any = real, _key: str = key, **kwargs: Any) -> Any:
            seen[_key].append(type(module).__name__)
            return _real(module, *args, **kwargs)

        monkeypatch.setattr(onnx_graph, name, spy)
    return seen
