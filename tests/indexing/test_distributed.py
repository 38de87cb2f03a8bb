"""Distributed build on Ray Data: same records, bit-identical vectors, one ordinary index.

The Ray tests start a local Ray instance themselves (``ray.init(num_cpus=2)``) and are
skipped, with the reason, when ray is not installed (``pip install 'qaindex[ray]'``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FAQ

from qaindex import Ranker
from qaindex.cli import main
from qaindex.errors import CorpusError, MissingDependencyError
from qaindex.indexing.distributed import build_on_ray, chunk_ranges, line_offsets
from qaindex.indexing.streaming import build_from_file
from qaindex.model import Model

try:
    import ray
except ImportError:
    ray = None

ROOT = Path(__file__).resolve().parents[2]
needs_ray = pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'qaindex[ray]')")


def _corpus(path: Path) -> Path:
    """A BOM, blank lines, plain records and answer-selection rows repeating an aid."""
    lines = ["\ufeff" + json.dumps({"id": "first", "answer": FAQ[0]["answer"]}), ""]
    for i in range(30):
        words = FAQ[i % len(FAQ)]["answer"].split()
        lines.append(json.dumps({"id": f"a{i}", "answer": " ".join(words[: 2 + i % 11]), "k": i}))
        if i % 7 == 3:
            lines.append("  ")
    row = {"qid": "q1", "question": "reset?", "aid": "b1", "answer": "Use the reset link.", "label": 1}
    lines += [json.dumps(row), json.dumps({**row, "qid": "q2", "question": "link?"})]
    lines += [json.dumps({"answer": f"tail {i} \u2028 sep"}) for i in range(9)]  # U+2028 inside a line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    assert ray is not None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@needs_ray
def test_a_successful_local_ray_build_prints_no_ray_noise(faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    # a process of its own: Ray's core worker writes to the process's stderr, past Python
    index = tmp_path / "ix"
    args = ["build", str(faq_file), "--model", str(faq_model), "--index", str(index), "--device", "cpu", "--ray"]
    done = subprocess.run([sys.executable, "-m", "qaindex", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"indexed 5 answers into {index}")
    for noise in ("max_restarts", "core_worker", "Starting execution", "Progress bars", "concurrent actors", "Warning"):
        assert noise not in done.stderr, done.stderr


def test_only_a_local_ray_build_turns_actor_restarts_off() -> None:
    from qaindex.indexing.distributed import _no_restarts, _restart_options

    class Dataset:
        def map_batches(self, fn: object, *, ray_remote_args_fn: object = None) -> None: ...

    class OldDataset:
        def map_batches(self, fn: object) -> None: ...

    assert _restart_options(Dataset(), restart_actors=True) == {}
    assert _restart_options(Dataset(), restart_actors=False) == {"ray_remote_args_fn": _no_restarts}
    assert _restart_options(OldDataset(), restart_actors=False) == {}
    assert _no_restarts() == {"max_restarts": 0, "max_task_retries": 0}


@needs_ray
def test_ray_build_equals_local_build(local_ray: None, faq_model: Path, tmp_path: Path) -> None:
    path = _corpus(tmp_path / "c.jsonl")
    local = Ranker.build(path, model=faq_model, device="cpu")
    # chunks of 8 answers: 6 read tasks and encoder calls, shared by the 2 actors
    distributed = build_on_ray(path, model=faq_model, device="cpu", chunk_size=8, workers=2)
    # the local streaming build with the same chunks gives bit-identical vectors
    store, vectors, _ = build_from_file(path, Model.load(faq_model, device="cpu"), device="cpu", chunk_size=8)
    assert [r.to_json() for r in distributed.records()] == [r.to_json() for r in local.records()]
    assert distributed._records.content() == store.content()
    assert distributed.get("b1").questions == ("reset?", "link?")
    np.testing.assert_array_equal(np.asarray(distributed._vectors), np.asarray(vectors))
    np.testing.assert_allclose(np.asarray(distributed._vectors), np.asarray(local._vectors), rtol=0, atol=1e-6)
    questions = ["how do I reset my password", "refund", "tail 3"]
    assert [[h.id for h in hits] for hits in distributed.search_batch(questions, 5)] == [
        [h.id for h in hits] for hits in local.search_batch(questions, 5)
    ]
    # the CLI, on the Ray instance already running: an ordinary index, loaded like any other
    index = tmp_path / "ix"
    result = CliRunner().invoke(
        main, ["build", str(path), "--model", str(faq_model), "--index", str(index), "--device", "cpu", "--ray"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"indexed {len(local)} answers into {index}")
    loaded = Ranker.load(index, device="cpu")
    # one chunk (the default size): bit-identical to one local encode call of all the answers
    one_thread = Model.load(faq_model, device="cpu", threads=1)
    expected = one_thread.encode([r.answer for r in local.records()], role="answer")
    np.testing.assert_array_equal(np.asarray(loaded._vectors), expected)
    np.testing.assert_allclose(np.asarray(loaded._vectors), np.asarray(local._vectors), rtol=0, atol=1e-6)
    assert [r.to_json() for r in loaded.records()] == [r.to_json() for r in local.records()]


@needs_ray
def test_bad_line_fails_before_ray_runs(faq_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"answer": "fine"}\n{"answer": 3}\n', encoding="utf-8")
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started for an invalid corpus"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(CorpusError, match=rf'^{path}:2: field "answer" must be a string, got int$'):
        build_on_ray(path, model=faq_model, device="cpu")


def test_chunk_ranges_cover_the_chunks_lines(tmp_path: Path) -> None:
    path = _corpus(tmp_path / "c.jsonl")
    raw = path.read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(raw) if b == 10]  # where each 1-based line starts
    non_blank = [n for n in range(1, len(starts)) if raw[starts[n - 1] : starts[n] - 1].strip()]
    record_lines = np.array(non_blank[:-1], np.int64)  # leave the last out: a range may hold lines of no answer
    assert line_offsets(path, record_lines).tolist() == [starts[n - 1] for n in record_lines]
    ranges = chunk_ranges(path, record_lines, 5)
    assert [len(lines) for *_, lines in ranges] == [5] * (len(record_lines) // 5) + (
        [len(record_lines) % 5] if len(record_lines) % 5 else []
    )
    for (start, end, first, lines), following in zip(ranges, [*ranges[1:], None], strict=True):
        assert start == starts[first - 1] == starts[int(lines[0]) - 1]
        assert end == (following[0] if following else len(raw))


def test_ray_missing_says_which_extra(faq_model: Path, faq_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError) as info:
        build_on_ray(faq_file, model=faq_model)
    assert str(info.value) == "ray is not installed; install it with `pip install 'qaindex[ray]'` to build with --ray"
    result = CliRunner().invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--ray", "local"])
    assert (result.exit_code, result.stderr) == (1, f"Error: {info.value}\n")


def test_import_qaindex_never_imports_ray() -> None:
    code = "import sys, qaindex, qaindex.cli, qaindex.indexing.streaming; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@needs_ray
def test_unreachable_cluster_is_one_line(faq_model: Path, faq_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance.\nmore detail")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    result = CliRunner().invoke(main, ["build", str(faq_file), "--model", str(faq_model), "--ray", "ray://head:10001"])
    assert (result.exit_code, result.stderr) == (
        1,
        "Error: --ray ray://head:10001: cannot connect to Ray (Could not find any running Ray instance.); start the "
        "cluster (`ray start --head`), check the address (e.g. ray://head:10001 or auto), or use --ray local\n",
    )


@needs_ray
def test_a_shard_set_built_and_searched_on_ray_is_the_one_built_here(local_ray: None, tmp_path: Path) -> None:
    """Shards built as Ray tasks and searched through one Ray actor each give the shard set
    built and searched in this process, byte for byte and hit for hit."""
    from qaindex.sharded import ShardedRanker

    records = [json.loads(line) for line in (ROOT / "examples" / "faq.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = [q for r in records for q in r.get("questions", [])][::7]
    here = ShardedRanker.build(records, tmp_path / "here", shards=3, index_kind="flat")
    there = ShardedRanker.build(records, tmp_path / "there", shards=3, index_kind="flat", ray="local")
    try:
        assert there.info()["ray"] and not here.info()["ray"]
        for i in range(3):
            a, b = Ranker.load(tmp_path / "here" / f"shard-00{i}"), Ranker.load(tmp_path / "there" / f"shard-00{i}")
            assert [r.id for r in a.records()] == [r.id for r in b.records()]
            assert np.array_equal(np.asarray(a.state().vectors), np.asarray(b.state().vectors))
        for hybrid in (True, False):
            got, want = (
                there.search_batch(questions, 10, hybrid=hybrid),
                here.search_batch(questions, 10, hybrid=hybrid),
            )
            assert [[(h.id, h.score, h.matched) for h in hits] for hits in got] == [
                [(h.id, h.score, h.matched) for h in hits] for hits in want
            ]
    finally:
        there.close()
