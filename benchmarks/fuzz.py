"""Fuzz the public API and the CLI with hypothesis; count errors that are not clean.

Every input a user can give must end in a result or a :class:`qaindex.QAIndexError` (API),
and in one line on stderr with exit code 0, 1 or 2 and no traceback (CLI). This script
generates inputs (valid, nearly valid and garbage: huge and negative numbers, NaN/inf,
wrong types, lone surrogates, deep nesting, random bytes) and counts:

- API: calls of every public entry point (``Ranker.build/load/edit/save/search/search_batch/
  search_vectors/hits/candidates/add/remove/recall/configure/get/info/verify``,
  ``Model.load/read_manifest/encode/score``, ``Reranker.load``, ``read_corpus`` on generated
  JSONL bytes, ``records_from_dicts``, ``evaluate_model/evaluate_via_index/evaluate_pooled/
  pooled_metrics`` and the retrievers' constructors) with generated arguments (paths of every
  type, too long or with NUL bytes, flags as arrays, threads from -1 to 10**9, huge numbers,
  ragged lists, 0-d arrays) that raised anything but ``QAIndexError``;
- CLI (click's ``CliRunner``, plus a few real subprocesses): runs that printed a traceback,
  ended in an exception click did not handle, exited with a code other than 0/1/2, or hit the
  CLI's last-resort handler ("unexpected internal error", i.e. a bug).

The index and model are tiny (the test suite's ONNX bag-of-words model), so the run measures
input handling, not model quality.

Resources (``--resources``, on in the full run): the largest requests (300 questions x
``k = 10**9`` through ``search_batch``, ``search_vectors`` and ``qaindex search -``, and
``qaindex info --recall --sample 1e9 -k 1e9``) on a 62,000-answer index, each in its own
process, with its peak resident memory (``ru_maxrss``) and outcome.

Usage::

    python benchmarks/fuzz.py [--quick] [--api N] [--cli N] [--subprocesses N] [--seed S] [--jobs J] [--no-resources]

Prints the counts and writes ``benchmarks/results/fuzz.json`` (``--quick``: a small run,
written to ``fuzz-quick.json`` unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from onnx_models import make_model  # noqa: E402

from qaindex import QAIndexError, Ranker, Reranker  # noqa: E402
from qaindex.corpus import read_corpus, records_from_dicts  # noqa: E402
from qaindex.eval.datasets import Candidate, QuestionGroup  # noqa: E402
from qaindex.eval.evaluate import evaluate_model, evaluate_pooled, evaluate_via_index, pooled_metrics  # noqa: E402
from qaindex.model import Model  # noqa: E402
from qaindex.text.tokenizer import Tokenizer  # noqa: E402

CALLS_PER_EXAMPLE = 8
WORDS = ["reset", "password", "refund", "order", "export", "notes", "sync", "login", "app", "menu", "email", "days"]
DIM = 6


# -- the tiny world ------------------------------------------------------------------------------


def make_world(directory: Path) -> tuple[Model, Path, Path]:
    """A tiny model, a corpus file and a saved index under ``directory``."""
    vocab = Tokenizer.build_word_vocab(WORDS)
    emb = np.random.default_rng(0).normal(scale=0.15, size=(len(vocab), DIM)).astype(np.float32)
    emb[0] = 0.0
    model_dir = make_model(directory / "model", vocab, emb)
    corpus = directory / "corpus.jsonl"
    lines = [{"id": f"a{i}", "answer": " ".join(WORDS[i : i + 3]), "questions": [WORDS[i]], "n": i} for i in range(10)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    index = directory / "index"
    Ranker.build(corpus, model=model_dir, device="cpu").save(index)
    return Model.load(model_dir, device="cpu"), corpus, index


# -- strategies ------------------------------------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "a \udfff b", "\udcff", "x\ud83d"])
TEXT = st.one_of(
    st.text(max_size=30),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join),
    SURROGATES,
    st.sampled_from(["", " ", "\n", "\x00", "🙂☕", "a" * 5000]),
)
INTS = st.one_of(
    st.integers(-3, 30),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 10**20, 99999999999999999999]),
)
FLOATS = st.one_of(st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -0.0]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT, st.binary(max_size=8))
ANY = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(TEXT, INTS), inner, max_size=4),
        st.frozensets(st.integers(0, 5), max_size=3),
    ),
    max_leaves=10,
)
KS = st.one_of(INTS, st.integers(1, 12), ANY)
ARRAYS = st.one_of(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int64, np.float16, np.bool_, np.complex64, np.uint8]),
        st.one_of(st.just((2, DIM)), hnp.array_shapes(min_dims=0, max_dims=3, max_side=7)),
    ),
    hnp.arrays(np.float32, st.just((3, DIM)), elements=st.floats(-0.375, 0.375, width=32)),
    st.lists(st.lists(FLOATS, min_size=DIM, max_size=DIM), max_size=3),
    ANY,
)


BAD_PATHS = st.sampled_from(
    [
        "", "\x00", "a\x00b", "x" * 300, "d/" + "x" * 300, "/".join(["y" * 200] * 25), "\udcff", "\ud800/x",
        "/proc/self/status", "/", ".", "missing", "/proc/foo/bar", "🙂" * 70,
    ]
)  # fmt: skip
FLAGS = st.one_of(
    st.booleans(),
    st.sampled_from([np.bool_(True), np.array([1, 2]), np.array(True), 0, 1, "yes", None, 1.0]),
    ANY,
)
THREADS = st.one_of(
    st.none(),
    st.integers(1, 4),
    st.sampled_from([-1, 0, 9, 1000, 10**9, 2**63, 2.0, True, np.int64(2), "2"]),
    ANY,
)
DEVICES = st.one_of(st.just("cpu"), st.sampled_from(["auto", "tpu", "", "CPU", ["cpu"], None]), ANY)
NUMBERS = st.one_of(
    FLOATS,
    INTS,
    st.sampled_from([10**100, -(10**100), 10**400, np.float32(0.5), np.int64(3), np.float64(np.nan), "1", True]),
    ANY,
)
RAGGED = st.one_of(
    st.just([[1.0], [2.0, 3.0]]),
    st.lists(st.lists(FLOATS, max_size=3), max_size=3),
    st.lists(st.lists(st.integers(-2, 12), min_size=2, max_size=2), max_size=3),
    ARRAYS,
)


def paths(valid: list[str]) -> st.SearchStrategy[Any]:
    """Valid paths (a third of the draws), as str or Path, and everything else a path can be."""
    good = st.sampled_from(valid)
    return st.one_of(
        good,
        good.map(Path),
        good,
        BAD_PATHS,
        BAD_PATHS.map(lambda p: p.encode("utf-8", "surrogatepass")),
        st.binary(max_size=8),
        ANY,
    )


def deep(depth: int, kind: str) -> str:
    return kind[0] * depth + kind[1] * depth


RECORD = st.one_of(
    st.fixed_dictionaries(
        {"answer": TEXT},
        optional={
            "id": st.one_of(INTS, TEXT, ANY),
            "question": ANY,
            "questions": ANY,
            "meta": ANY,
            "aid": ANY,
            "label": ANY,
        },
    ),
    st.fixed_dictionaries({"answer": st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)}),
    ANY,
)


def _line(value: Any) -> bytes:
    try:
        return json.dumps(value, allow_nan=True, default=repr).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError, RecursionError):
        return b"{}"


JSONL_LINE = st.one_of(
    RECORD.map(_line),
    st.binary(max_size=40),
    st.integers(1, 200_000).map(lambda d: ('{"answer": ' + deep(d, "[]") + "}").encode()),
    st.integers(1, 200).map(lambda d: ('{"answer": "a", "m": ' + deep(d, "[]") + "}").encode()),
    st.sampled_from(
        [
            b'{"answer": "a \\ud800"}',
            b'{"answer": "a", "x": NaN}',
            b'{"answer": "a", "x": -Infinity}',
            b'{"answer": "a", "id": 1e400}',
            b'{"answer": "a", "n": ' + b"9" * 5000 + b"}",
            b"\xef\xbb\xbf" + b'{"answer": "bom"}',
            b'{"answer": "a", "id": 9223372036854775808}',
            b'{"qid": "q", "question": "?", "aid": "x", "answer": "y", "label": 1}',
            b'{"answer": "dup", "id": 1}',
        ]
    ),
)
JSONL = st.lists(JSONL_LINE, min_size=0, max_size=5).map(lambda lines: b"\n".join(lines))


# -- the API fuzz ------------------------------------------------------------------------------


class Tally:
    """Counts inputs and non-clean outcomes by kind (exception type and where)."""

    def __init__(self) -> None:
        self.inputs = 0
        self.by_call: collections.Counter[str] = collections.Counter()
        self.clean_errors = 0
        self.bad: collections.Counter[str] = collections.Counter()
        self.examples: dict[str, str] = {}

    def call(self, what: str, fn: Callable[[], Any]) -> None:
        self.inputs += 1
        self.by_call[what] += 1
        try:
            fn()
        except QAIndexError:
            self.clean_errors += 1
        except Exception as exc:  # noqa: BLE001 - counting them is the point
            key = f"{what}: {type(exc).__name__}"
            self.bad[key] += 1
            if key not in self.examples:
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                self.examples[key] = f"{exc!s:.200} at {Path(tb.filename).name}:{tb.lineno}"

    def report(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "clean_errors": self.clean_errors,
            "unclean": sum(self.bad.values()),
            "unclean_by_kind": dict(self.bad.most_common()),
            "inputs_by_call": dict(sorted(self.by_call.items())),
            "examples": self.examples,
        }


def _settings(n: int, seed: int) -> Any:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def fuzz_api(world: tuple[Model, Path, Path], n: int, seed: int, tmp: Path) -> dict[str, Any]:
    """About ``n`` API inputs (each example makes one call)."""
    model, corpus, index = world
    tally = Tally()
    state: dict[str, Ranker] = {"ranker": Ranker.load(index, device="cpu")}
    jsonl_path = tmp / "fuzz.jsonl"
    cwd = tmp / "cwd"  # relative paths the fuzz saves to land here
    saves = tmp / "saves"
    edited = tmp / "edited"
    cwd.mkdir(exist_ok=True)
    saves.mkdir(exist_ok=True)
    shutil.copytree(index, edited, dirs_exist_ok=True)
    load_paths = paths([str(index), str(index), str(model.directory), str(corpus), str(tmp / "missing")])
    save_paths = paths([str(saves / "a"), str(saves / "b"), str(saves / "c" / "d"), str(index / "manifest.json")])
    model_paths = paths([str(model.directory), str(model.directory), str(index), str(corpus)])
    try:
        from qaindex.integrations.llamaindex import QAIndexRetriever as LlamaRetriever
    except QAIndexError:  # the extra is not installed
        LlamaRetriever = None
    try:
        from qaindex.integrations.langchain import QAIndexRetriever as LangchainRetriever
    except QAIndexError:
        LangchainRetriever = None

    def fresh() -> Ranker:
        r = state["ranker"]
        if len(r) > 60 or len(r) < 3:
            state["ranker"] = r = Ranker.load(index, device="cpu")
        return r

    def op_read_corpus(data: st.DataObject) -> None:
        raw = data.draw(JSONL)
        jsonl_path.write_bytes(raw)
        existing = data.draw(st.one_of(st.just(()), st.lists(st.one_of(INTS, TEXT), max_size=3), ANY))
        tally.call("read_corpus", lambda: read_corpus(jsonl_path, existing_ids=existing))

    def op_build(data: st.DataObject) -> None:
        source = data.draw(st.one_of(st.lists(RECORD, min_size=1, max_size=4), ANY, st.just(str(corpus))))
        if data.draw(st.booleans()):
            raw = data.draw(JSONL)
            jsonl_path.write_bytes(raw)
            source = jsonl_path
        kw: dict[str, Any] = {}
        for name, strat in (
            ("batch_size", KS),
            ("index_kind", st.one_of(st.sampled_from(["auto", "flat", "hnsw"]), ANY)),
            (
                "hnsw",
                st.one_of(st.none(), st.dictionaries(st.sampled_from(["M", "ef_search", "x"]), KS, max_size=2), ANY),
            ),
            ("overfetch", KS),
            ("device", st.one_of(st.just("cpu"), ANY)),
            ("progress", st.one_of(st.just(False), ANY)),
            ("recall", st.one_of(st.none(), st.just(0.9), NUMBERS)),
        ):
            if data.draw(st.booleans()):
                kw[name] = data.draw(strat)
        kw.setdefault("device", "cpu")
        tally.call("Ranker.build", lambda: Ranker.build(source, model=model, **kw))

    def op_records(data: st.DataObject) -> None:
        items = data.draw(st.one_of(st.lists(RECORD, max_size=4), ANY))
        tally.call("records_from_dicts", lambda: records_from_dicts(items))

    def op_search(data: st.DataObject) -> None:
        r = fresh()
        q = data.draw(st.one_of(TEXT, ANY))
        k = data.draw(KS)
        tally.call("Ranker.search", lambda: r.search(q, k))

    def op_search_batch(data: st.DataObject) -> None:
        r = fresh()
        qs = data.draw(st.one_of(st.lists(TEXT, max_size=4), ANY))
        k = data.draw(KS)
        tally.call("Ranker.search_batch", lambda: r.search_batch(qs, k))

    def op_search_vectors(data: st.DataObject) -> None:
        r = fresh()
        arr = data.draw(ARRAYS)
        k = data.draw(KS)
        coarse = data.draw(st.one_of(st.booleans(), ANY))
        tally.call("Ranker.search_vectors", lambda: r.search_vectors(arr, k, use_coarse=coarse))

    def op_candidates(data: st.DataObject) -> None:
        r = fresh()
        arr = data.draw(ARRAYS)
        m = data.draw(KS)
        tally.call("Ranker.candidates", lambda: r.candidates(arr, m, use_coarse=data.draw(st.booleans())))

    def op_add(data: st.DataObject) -> None:
        r = fresh()
        recs = data.draw(st.one_of(st.lists(RECORD, min_size=1, max_size=3), ANY))
        bs = data.draw(st.one_of(st.just(256), KS))
        tally.call("Ranker.add", lambda: r.add(recs, batch_size=bs))

    def op_remove(data: st.DataObject) -> None:
        r = fresh()
        ids = data.draw(
            st.one_of(st.lists(st.one_of(st.sampled_from([f"a{i}" for i in range(10)]), INTS, TEXT), max_size=3), ANY)
        )
        tally.call("Ranker.remove", lambda: r.remove(ids))

    def op_recall(data: st.DataObject) -> None:
        r = fresh()
        kw: dict[str, Any] = {}
        for name, strat in (
            ("questions", st.one_of(st.none(), st.lists(TEXT, max_size=3), ANY)),
            ("sample", KS),
            ("seed", KS),
        ):
            if data.draw(st.booleans()):
                kw[name] = data.draw(strat)
        k = data.draw(KS)
        tally.call("Ranker.recall", lambda: r.recall(k, **kw))

    def op_configure(data: st.DataObject) -> None:
        r = fresh()
        kw = {
            name: data.draw(st.one_of(st.none(), KS))
            for name in ("overfetch", "ef_search", "nprobe", "refine", "memory_budget")
            if data.draw(st.booleans())
        }
        tally.call("Ranker.configure", lambda: r.configure(**kw))
        r.overfetch = 10
        r.memory_budget = None

    def op_get(data: st.DataObject) -> None:
        r = fresh()
        ident = data.draw(st.one_of(st.sampled_from(["a1", "a2", 1]), ANY))
        tally.call("Ranker.get", lambda: r.get(ident))

    def op_encode(data: st.DataObject) -> None:
        texts = data.draw(st.one_of(st.lists(TEXT, max_size=4), ANY))
        role = data.draw(st.one_of(st.sampled_from(["question", "answer"]), ANY))
        bs = data.draw(st.one_of(st.just(256), KS))
        tally.call("Model.encode", lambda: model.encode(texts, role=role, batch_size=bs))

    def op_score(data: st.DataObject) -> None:
        q = data.draw(ARRAYS)
        c = data.draw(
            st.one_of(ARRAYS, hnp.arrays(np.float32, st.just((3, 2, DIM)), elements=st.floats(-0.25, 0.25, width=32)))
        )
        tally.call("Model.score", lambda: model.score(q, c))

    def op_evaluate(data: st.DataObject) -> None:
        groups = data.draw(
            st.one_of(
                st.lists(
                    st.builds(
                        QuestionGroup,
                        st.just("q"),
                        TEXT,
                        st.lists(
                            st.builds(
                                Candidate, st.sampled_from(["x", "y"]), TEXT, st.one_of(st.sampled_from([0, 1]), INTS)
                            ),
                            max_size=3,
                        ).map(tuple),
                    ),
                    max_size=3,
                ),
                ANY,
            )
        )
        tally.call(
            "evaluate_model", lambda: evaluate_model(model, groups, batch_size=data.draw(st.one_of(st.just(8), KS)))
        )

    def op_load(data: st.DataObject) -> None:
        path = data.draw(load_paths)
        kw = {
            name: data.draw(strat)
            for name, strat in (("threads", THREADS), ("verify", FLAGS))
            if data.draw(st.booleans())
        }
        kw["device"] = data.draw(DEVICES) if data.draw(st.integers(0, 3)) == 0 else "cpu"
        tally.call("Ranker.load", lambda: Ranker.load(path, **kw))

    def op_edit(data: st.DataObject) -> None:
        path = data.draw(st.one_of(st.just(str(edited)), load_paths))
        kw = {
            name: data.draw(strat)
            for name, strat in (("threads", THREADS), ("verify", FLAGS))
            if data.draw(st.booleans())
        }
        kw["device"] = data.draw(DEVICES) if data.draw(st.integers(0, 3)) == 0 else "cpu"
        if path == str(index) or path == Path(index):
            path = str(edited)  # never change the shared index

        def edit() -> None:
            with Ranker.edit(path, lock_timeout=5, **kw):
                pass

        tally.call("Ranker.edit", edit)

    def op_save(data: st.DataObject) -> None:
        r = fresh()
        path = data.draw(save_paths)
        overwrite = data.draw(FLAGS) if data.draw(st.booleans()) else False
        if len(list(cwd.iterdir())) + len(list(saves.iterdir())) > 30:
            for d in (cwd, saves):
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir()
        tally.call("Ranker.save", lambda: r.save(path, overwrite=overwrite, lock_timeout=5))

    def op_hits(data: st.DataObject) -> None:
        r = fresh()
        args = [data.draw(RAGGED) for _ in range(3)]
        if data.draw(st.booleans()):  # a real result, with one of its arrays replaced
            real = list(r.search_vectors(r.model.encode(["reset"], role="question"), 3))
            real[data.draw(st.integers(0, 2))] = args[0]
            args = real
        tally.call("Ranker.hits", lambda: r.hits(*args))

    def op_search_options(data: st.DataObject) -> None:
        r = fresh()
        kw: dict[str, Any] = {}
        for name, strat in (
            ("min_score", st.one_of(st.none(), NUMBERS)),
            (
                "where",
                st.one_of(
                    st.none(),
                    st.dictionaries(
                        st.sampled_from(["n", "id", "x"]), st.one_of(INTS, st.lists(INTS, max_size=3), ANY), max_size=2
                    ),
                    st.just(lambda rec: rec.id == "a1"),
                    ANY,
                ),
            ),
            ("rerank", st.one_of(st.none(), st.just(False), paths([str(model.directory)]))),
            ("depth", st.one_of(st.none(), KS)),
        ):
            if data.draw(st.booleans()):
                kw[name] = data.draw(strat)
        q = data.draw(st.one_of(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join), TEXT))
        k = data.draw(st.one_of(st.integers(1, 12), KS))
        tally.call("Ranker.search(options)", lambda: r.search(q, k, **kw))

    def op_model_load(data: st.DataObject) -> None:
        path = data.draw(st.one_of(st.none(), model_paths)) if data.draw(st.integers(0, 9)) else None
        kw = {
            name: data.draw(strat)
            for name, strat in (("threads", THREADS), ("verify", FLAGS))
            if data.draw(st.booleans())
        }
        kw["device"] = data.draw(DEVICES) if data.draw(st.integers(0, 3)) == 0 else "cpu"
        which = data.draw(st.sampled_from(["Model.load", "Model.read_manifest", "Reranker.load"]))
        if which == "Model.read_manifest":
            verify = kw.get("verify", True)
            tally.call(which, lambda: Model.read_manifest(path, verify=verify))  # type: ignore[arg-type]
        elif which == "Reranker.load":
            tally.call(which, lambda: Reranker.load(path, **kw))  # type: ignore[arg-type]
        else:
            tally.call(which, lambda: Model.load(path, **kw))

    def op_info(data: st.DataObject) -> None:
        r = (
            fresh()
            if data.draw(st.booleans())
            else Ranker.build([{"answer": "reset"}, {"answer": "refund"}], model=model, device="cpu")
        )
        which = data.draw(st.sampled_from(["info", "verify", "records", "len"]))
        call = {"info": r.info, "verify": r.verify, "records": lambda: list(r.records()), "len": lambda: len(r)}[which]
        tally.call(f"Ranker.{which}", call)

    def op_evaluate_index(data: st.DataObject) -> None:
        groups = data.draw(
            st.one_of(
                st.lists(
                    st.builds(
                        QuestionGroup,
                        st.just("q"),
                        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
                        st.lists(
                            st.builds(
                                Candidate,
                                st.sampled_from(["x", "y", "z"]),
                                st.one_of(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join), TEXT),
                                st.sampled_from([0, 1]),
                            ),
                            min_size=1,
                            max_size=3,
                        ).map(tuple),
                    ),
                    max_size=3,
                ),
                ANY,
            )
        )
        target = model if data.draw(st.integers(0, 5)) else data.draw(ANY)
        kw: dict[str, Any] = {"device": "cpu"}
        for name, strat in (
            ("batch_size", KS),
            ("index_kind", st.one_of(st.sampled_from(["flat", "auto"]), ANY)),
            ("device", DEVICES),
        ):
            if data.draw(st.booleans()):
                kw[name] = data.draw(strat)
        if data.draw(st.booleans()):
            tally.call("evaluate_via_index", lambda: evaluate_via_index(target, groups, **kw))
        else:
            if data.draw(st.booleans()):
                kw["k"] = data.draw(KS)
            tally.call("evaluate_pooled", lambda: evaluate_pooled(target, groups, **kw))

    def op_pooled_metrics(data: st.DataObject) -> None:
        rankings = data.draw(st.one_of(RAGGED, st.lists(st.lists(st.integers(-1, 5), max_size=4), max_size=3), ANY))
        relevant = data.draw(
            st.one_of(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=2), max_size=3), RAGGED, ANY)
        )
        k = data.draw(st.one_of(st.integers(1, 5), KS))
        tally.call("pooled_metrics", lambda: pooled_metrics(rankings, relevant, k))

    def op_retriever(data: st.DataObject) -> None:
        r = fresh() if data.draw(st.integers(0, 4)) else data.draw(ANY)
        k = data.draw(st.one_of(st.integers(1, 5), KS))
        kw = data.draw(
            st.one_of(
                st.just({}),
                st.dictionaries(
                    st.sampled_from(["min_score", "where", "depth", "rerank", "bogus"]), NUMBERS, max_size=2
                ),
                ANY,
            )
        )
        q = data.draw(st.one_of(st.sampled_from(["reset password", "refund"]), TEXT))
        if LlamaRetriever is not None and data.draw(st.booleans()):
            extra = kw if isinstance(kw, dict) and all(isinstance(key, str) for key in kw) else {}
            tally.call("llamaindex.QAIndexRetriever", lambda: LlamaRetriever(r, k, **extra).retrieve(q))
        elif LangchainRetriever is not None:
            tally.call(
                "langchain.QAIndexRetriever",
                lambda: LangchainRetriever(ranker=r, k=k, search_kwargs=kw).invoke(q),
            )

    def op_memory(data: st.DataObject) -> None:
        r = fresh()
        n = data.draw(st.sampled_from([1, 2, 300]))
        k = data.draw(st.sampled_from([10**9, 10**30, 3]))
        # a small budget: the tiny index's largest requests are refused (a large one would
        # make this run slow without testing more)
        budget = data.draw(st.one_of(st.sampled_from([2**20, 2**21]), KS)) if n > 2 else None
        which = data.draw(st.sampled_from(["search_batch", "search_vectors", "recall", "candidates"]))

        def call() -> None:
            if budget is not None:
                r.configure(memory_budget=budget)
            try:
                if which == "search_batch":
                    r.search_batch(["reset password"] * n, k)
                elif which == "recall":
                    r.recall(k, sample=n)
                else:
                    qv = np.repeat(r.model.encode(["refund"], role="question"), n, axis=0)
                    getattr(r, which)(qv, k)
            finally:
                r.memory_budget = None

        tally.call(f"memory: {which}", call)

    ops = [
        op_read_corpus, op_build, op_records, op_search, op_search_batch, op_search_vectors, op_candidates,
        op_add, op_remove, op_recall, op_configure, op_get, op_encode, op_score, op_evaluate,
        op_load, op_edit, op_save, op_hits, op_search_options, op_model_load, op_info, op_evaluate_index,
        op_pooled_metrics, op_retriever, op_memory,
    ]  # fmt: skip

    # several calls per generated example: hypothesis's cost per example (not per draw) is
    # most of the run time otherwise
    per_example = CALLS_PER_EXAMPLE

    @_settings(max(1, -(-n // per_example)), seed)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        for _ in range(per_example):
            data.draw(st.sampled_from(ops))(data)

    here = os.getcwd()
    os.chdir(cwd)
    try:
        run()
    finally:
        os.chdir(here)
    return tally.report()


# -- the CLI fuzz ------------------------------------------------------------------------------

OPTION_VALUES = st.one_of(
    st.sampled_from(
        ["0", "-1", "1", "3", "99999999999999999999", "1e3", "nan", "", "auto", "cpu", "cuda", "hnsw", "flat"]
    ),
    st.text(max_size=12),
    SURROGATES,
    st.integers(-(10**25), 10**25).map(str),
)


def _cli_args(data: st.DataObject, world: tuple[Model, Path, Path], scratch: Path) -> list[str]:
    model, corpus, index = world
    paths = st.sampled_from(
        [str(index)] * 4
        + [str(scratch / "ix")] * 4
        + ["/proc/foo", "/proc/self/status", str(corpus), str(scratch), "/", "", "\udcff", "/proc/self/fd/0/x"]
    )
    command = data.draw(
        st.sampled_from(
            ["search"] * 6 + ["info"] * 2 + ["add", "remove", "build", "eval", "inspect", "nope", "--version", "-h"]
        )
    )
    args = [command]
    if command == "search":
        args += [data.draw(st.one_of(TEXT, st.just("reset password"), st.just("-")))]
    elif command in ("add", "build"):
        jsonl = scratch / "c.jsonl"
        jsonl.write_bytes(data.draw(JSONL))
        args += [data.draw(st.sampled_from([str(jsonl), str(jsonl), str(corpus), "/proc/foo", str(scratch)]))]
    elif command == "remove":
        args += data.draw(st.lists(st.one_of(st.sampled_from(["a1", "a2", "3"]), TEXT), max_size=3))
    elif command in ("eval", "inspect"):
        args += [data.draw(st.sampled_from([str(model.directory), str(corpus), "/proc/foo"]))]
        jsonl = scratch / "d.jsonl"
        jsonl.write_bytes(data.draw(JSONL))
        args += [str(jsonl)]
    valid = {
        "search": ["--index", "-k", "--json", "--device"],
        "info": ["--index", "-k", "--json", "--device", "--recall", "--sample", "--verify"],
        "build": ["--index", "--model", "--index-kind", "--overfetch", "--batch-size", "--device"],
        "add": ["--index", "--device"],
        "remove": ["--index"],
        "eval": ["--json", "--via-index", "--index-kind", "--device", "--batch-size"],
        "inspect": ["--device", "--batch-size"],
    }.get(command, ["--json"])
    numeric = st.one_of(st.integers(1, 20).map(str), st.sampled_from(["10000000000", "99999999999999999999"]))
    for _ in range(data.draw(st.integers(0, 4))):
        opt = data.draw(st.sampled_from(valid) if data.draw(st.integers(0, 9)) else st.just("--bogus"))
        args.append(opt)
        if opt in ("--index", "--model"):
            args.append(data.draw(paths))
        elif opt not in ("--json", "--recall", "--verify", "--via-index"):
            args.append(data.draw(st.one_of(numeric, numeric, OPTION_VALUES)))
    if "--index" not in args and command in ("search", "info", "add", "remove", "build"):
        args += ["--index", str(scratch / "ix") if command in ("add", "remove", "build") else str(index)]
    if command == "build" and "--model" not in args:
        args += ["--model", str(model.directory)]
    if "--device" not in args and command in ("search", "info", "add", "build", "eval", "inspect"):
        args += ["--device", "cpu"]
    return args


def fuzz_cli(world: tuple[Model, Path, Path], n: int, n_sub: int, seed: int, tmp: Path) -> dict[str, Any]:
    """``n`` CliRunner runs and ``n_sub`` real subprocesses."""
    from click.testing import CliRunner

    from qaindex.cli import main

    _, _, index = world
    runner = CliRunner()
    stats: dict[str, Any] = {"runs": 0, "subprocess_runs": 0, "exit_codes": collections.Counter(), "bad": []}

    def judge(args: list[str], code: int, output: str, exc: BaseException | None) -> None:
        stats["exit_codes"][str(code)] += 1
        problems = []
        if code not in (0, 1, 2):
            problems.append(f"exit {code}")
        if "Traceback" in output:
            problems.append("traceback")
        if exc is not None and not isinstance(exc, SystemExit):
            problems.append(f"unhandled {type(exc).__name__}: {exc!s:.100}")
        if "unexpected internal error" in output:
            problems.append("last-resort handler: " + output.strip().splitlines()[-1][:160])
        if code != 0 and len([line for line in output.splitlines() if line.startswith("Error:")]) != 1:
            problems.append("not exactly one Error: line")
        if problems:
            stats["bad"].append(
                {"args": [a.encode("utf-8", "backslashreplace").decode() for a in args], "problems": problems}
            )

    def scratch_index(scratch: Path) -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        shutil.copytree(index, scratch / "ix")

    scratch = tmp / "cli"

    @_settings(n, seed)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        scratch_index(scratch)
        args = _cli_args(data, world, scratch)
        stdin = data.draw(st.one_of(st.just(b"reset password\n"), st.binary(max_size=30)))
        res = runner.invoke(main, args, input=stdin)
        stats["runs"] += 1
        judge(args, res.exit_code, res.output, res.exception)

    run()

    rng = random.Random(seed)
    exe = [sys.executable, "-m", "qaindex.cli"]
    fixed = [
        ["search", "reset", "--index", str(index), "-k", "99999999999999999999"],
        ["search", "reset", "--index", "/proc/foo"],
        ["search", "-", "--index", str(index)],
        ["build", "/proc/foo", "--index", str(tmp / "sub-ix")],
        ["remove", "12", "--index", "/proc/self"],
        ["info", "--index", str(index), "--recall", "-k", "1000000000"],
    ]
    for i in range(n_sub):
        args = (
            fixed[i % len(fixed)]
            if i < len(fixed)
            else [*rng.choice(fixed)[:-1], rng.choice(["0", "-5", "x", "\udcff"])]
        )
        env = dict(os.environ, PYTHONIOENCODING=rng.choice(["utf-8", "ascii", "latin-1"]))
        proc = subprocess.run(
            [*exe, *args], input=rng.choice([b"reset\n", b"\xff\xfe\n", b""]), capture_output=True, timeout=120, env=env
        )
        stats["subprocess_runs"] += 1
        judge(args, proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "replace"), None)

    return {
        "runs": stats["runs"],
        "subprocess_runs": stats["subprocess_runs"],
        "exit_codes": dict(stats["exit_codes"]),
        "unclean": len(stats["bad"]),
        "examples": stats["bad"][:20],
    }


def _api_shard(n: int, seed: int) -> dict[str, Any]:
    """One process's share of the API fuzz, in its own tiny world."""
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        return fuzz_api(make_world(tmp), n, seed, tmp)


def _cli_shard(n: int, n_sub: int, seed: int) -> dict[str, Any]:
    """One process's share of the CLI fuzz, in its own tiny world."""
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        return fuzz_cli(make_world(tmp), n, n_sub, seed, tmp)


def _resource_run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmpdir:
        return measure_resources(Path(tmpdir))


def merge_cli_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The CLI reports of several shards as one."""
    codes: collections.Counter[str] = collections.Counter()
    for r in reports:
        codes.update(r["exit_codes"])
    return {
        "runs": sum(r["runs"] for r in reports),
        "subprocess_runs": sum(r["subprocess_runs"] for r in reports),
        "exit_codes": dict(codes),
        "unclean": sum(r["unclean"] for r in reports),
        "examples": [e for r in reports for e in r["examples"]][:20],
    }


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The API reports of several shards as one (counts summed, first example of each kind kept)."""
    bad: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    for r in reports:
        bad.update(r["unclean_by_kind"])
        calls.update(r["inputs_by_call"])
        for kind, text in r["examples"].items():
            examples.setdefault(kind, text)
    return {
        "inputs": sum(r["inputs"] for r in reports),
        "clean_errors": sum(r["clean_errors"] for r in reports),
        "unclean": sum(bad.values()),
        "unclean_by_kind": dict(bad.most_common()),
        "inputs_by_call": dict(sorted(calls.items())),
        "examples": examples,
        "shards": len(reports),
    }


# -- the resource run ---------------------------------------------------------------------------

_REQUEST_API = """
import sys, numpy as np
from qaindex import QAIndexError, Ranker
r = Ranker.load(sys.argv[1], device="cpu")
questions = [" ".join(sys.argv[3:5])] * int(sys.argv[5])
try:
    if sys.argv[2] == "search_batch":
        out = r.search_batch(questions, k=10**9)
        print(sum(map(len, out)), "hits")
    else:
        out = r.search_vectors(r.model.encode(questions, role="question"), 10**9)
        print(out[2].shape, "arrays")
except QAIndexError as exc:
    print("QAIndexError:", exc)
    sys.exit(1)
"""


def _peak_rss(argv: list[str], stdin: bytes, env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` in its own process; its exit code, peak RSS (``wait4``), seconds and output."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as feed:
        feed.write(stdin)
        feed.seek(0)
        proc = subprocess.Popen(argv, stdin=feed, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        size = os.fstat(out.fileno()).st_size
        first = (out.read(300) + err.read(2000)).decode("utf-8", "replace").strip().splitlines()
    return {
        "exit_code": proc.returncode,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
        "seconds": round(time.perf_counter() - started, 1),
        "stdout_mb": round(size / 2**20, 1),
        "output": first[-1][:300] if first else "",
    }


def measure_resources(
    tmp: Path, answers: int = 62_000, questions: int = 300, cli_questions: int = 20, budget: str | None = None
) -> dict[str, Any]:
    """The largest requests on an ``answers``-answer index, each in its own process (peak RSS),
    under the default memory budget (or ``budget``, as ``QAINDEX_MEMORY_BUDGET``).

    The CLI search prints every hit of ``cli_questions`` questions (``-k 1e9``: every answer
    each, in chunks of questions that fit the budget); its memory does not grow with the
    number of questions, only its run time and output do."""
    model_dir = tmp / "model"
    if not (model_dir / "manifest.json").is_file():
        make_world(tmp)
    rng = np.random.default_rng(0)
    corpus = tmp / "big.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for i in range(answers):
            words = rng.choice(WORDS, size=6)
            f.write(json.dumps({"id": f"a{i}", "answer": " ".join(words), "questions": [" ".join(words[:2])]}) + "\n")
    index = tmp / "big-index"
    Ranker.build(corpus, model=model_dir, device="cpu", index_kind="flat").save(index)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("QAINDEX_MEMORY_BUDGET", None)
    if budget is not None:
        env["QAINDEX_MEMORY_BUDGET"] = budget
    py = sys.executable
    lines = [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]}" for i in range(questions)]
    stdin = ("\n".join(lines[:cli_questions]) + "\n").encode()
    api = [py, "-c", _REQUEST_API, str(index)]
    cli = [py, "-m", "qaindex.cli"]
    ix = ["--index", str(index), "--device", "cpu"]
    huge = "1000000000"
    words = ["reset", "password", str(questions)]
    requests = {
        f"search_batch: {questions} questions x k=10**9 (API)": [*api, "search_batch", *words],
        f"search_vectors: {questions} questions x k=10**9 (API)": [*api, "search_vectors", *words],
        f"qaindex search - -k 1e9 --json, {cli_questions} questions on stdin": [
            *cli,
            "search",
            "-",
            *ix,
            "-k",
            huge,
            "--json",
        ],
        "qaindex info --recall --sample 1e9 -k 1e9": [*cli, "info", *ix, "--recall", "--sample", huge, "-k", huge],
        "qaindex info --recall (defaults: 200 questions, k=10)": [*cli, "info", *ix, "--recall"],
    }
    runs = {}
    for name, argv in requests.items():
        runs[name] = _peak_rss(argv, stdin, env)
        print(f"  {name}: exit {runs[name]['exit_code']}, peak RSS {runs[name]['peak_rss_mb']:.0f} MB, "
              f"{runs[name]['seconds']} s, {runs[name]['output'][:120]}")  # fmt: skip
    return {
        "answers": answers,
        "questions": questions,
        "cli_questions": cli_questions,
        "budget": budget or "1 GiB (default)",
        "requests": runs,
        "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="A small run (2,000 API inputs, 100 CLI runs).")
    parser.add_argument("--api", type=int, default=None, help="API inputs (default 50,000).")
    parser.add_argument("--cli", type=int, default=None, help="CliRunner runs (default 1,000).")
    parser.add_argument("--subprocesses", type=int, default=None, help="Real CLI subprocesses (default 24).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--jobs", type=int, default=1, help="Processes sharing the API inputs (seeds SEED, SEED+1, ...), default 1."
    )
    parser.add_argument(
        "--no-resources", action="store_true", help="Skip the peak-memory run of the largest requests (62,000 answers)."
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    n_api = args.api if args.api is not None else (2_000 if args.quick else 50_000)
    n_cli = args.cli if args.cli is not None else (100 if args.quick else 1_000)
    n_sub = args.subprocesses if args.subprocesses is not None else (6 if args.quick else 24)
    out = args.out or ROOT / "benchmarks" / "results" / ("fuzz-quick.json" if args.quick else "fuzz.json")
    random.seed(args.seed)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        world = make_world(tmp)
        if args.jobs > 1:  # API and CLI shards and the resource run, each in its own process
            from concurrent.futures import ProcessPoolExecutor

            def split(n: int, parts: int) -> list[int]:
                return [n // parts + (i < n % parts) for i in range(parts)]

            cli_jobs = max(1, args.jobs // 2)
            with ProcessPoolExecutor(max_workers=args.jobs + cli_jobs + 1) as pool:
                res = None if args.no_resources or args.quick else pool.submit(_resource_run)
                api_futures = [pool.submit(_api_shard, n, args.seed + i) for i, n in enumerate(split(n_api, args.jobs))]
                cli_futures = [
                    pool.submit(_cli_shard, n, s, args.seed + i)
                    for i, (n, s) in enumerate(zip(split(n_cli, cli_jobs), split(n_sub, cli_jobs), strict=True))
                ]
                api = merge_reports([f.result() for f in api_futures])
                api_seconds = time.perf_counter() - start
                cli = merge_cli_reports([f.result() for f in cli_futures])
                resources = None if res is None else res.result()
        else:
            api = fuzz_api(world, n_api, args.seed, tmp)
            api_seconds = time.perf_counter() - start
            cli = fuzz_cli(world, n_cli, n_sub, args.seed, tmp)
            resources = None if args.no_resources or args.quick else measure_resources(tmp)
    result = {
        "api": api,
        "cli": cli,
        "resources": resources,
        "seconds": {"api": round(api_seconds, 1), "total": round(time.perf_counter() - start, 1)},
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "command": " ".join(["python", "benchmarks/fuzz.py", *sys.argv[1:]]),
    }
    print(f"API: {api['inputs']:,} inputs, {api['clean_errors']:,} QAIndexError, {api['unclean']:,} other exceptions")
    for kind, count in api["unclean_by_kind"].items():
        print(f"  {count:6d}  {kind}: {api['examples'][kind]}")
    print(
        f"CLI: {cli['runs']:,} CliRunner runs + {cli['subprocess_runs']} subprocesses, exit codes {cli['exit_codes']}, "
        f"{cli['unclean']} with a traceback, an unhandled exception, an exit code not in 0/1/2 or a bug report"
    )
    for bad in cli["examples"][:10]:
        print(f"  {bad['problems']}: {bad['args']}")
    if resources is not None:
        print(
            f"resources: largest peak RSS {resources['max_peak_rss_mb']:.0f} MB "
            f"over {len(resources['requests'])} requests"
        )
    print(f"{result['seconds']['total']} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp_out, out)


if __name__ == "__main__":
    main()
