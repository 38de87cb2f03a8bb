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

    python -m tests.robustness.fuzz [--quick] [--api N] [--cli N] [--subprocesses N] [--seed S] [--jobs J] [--no-resources]

Prints the counts and writes ``benchmarks/results/fuzz.json`` (``--quick``: a small run,
written to ``fuzz-quick.json`` unless ``--out`` is given).
"""

from __future__ import annotations

import collections
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from benchmarks.common import ROOT, argument_parser, write_results
from qaindex import QAIndexError, Ranker, Reranker
from qaindex.corpus import read_corpus, records_from_dicts
from qaindex.eval.datasets import Candidate, QuestionGroup
from qaindex.eval.evaluate import evaluate_model, evaluate_pooled, evaluate_via_index, pooled_metrics
from qaindex.model import Model
from tests.robustness.fuzz_cli import fuzz_cli
from tests.robustness.fuzz_inputs import (
    ANY,
    ARRAYS,
    CALLS_PER_EXAMPLE,
    DEVICES,
    DIM,
    FLAGS,
    INTS,
    JSONL,
    KS,
    NUMBERS,
    RAGGED,
    RECORD,
    TEXT,
    THREADS,
    WORDS,
    Tally,
    hypothesis_settings,
    make_world,
    paths,
)
from tests.robustness.fuzz_resources import measure_resources


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

    turns = {"model_load": 0, "evaluate": 0}

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
        # the three loaders in turn (their random arguments stay random): drawn, one of them often
        # went unexercised in a whole run
        which = ("Model.load", "Model.read_manifest", "Reranker.load")[turns["model_load"] % 3]
        turns["model_load"] += 1
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
        k = data.draw(KS) if data.draw(st.booleans()) else None  # drawn either way: the same draws each turn
        turns["evaluate"] += 1  # the two evaluations in turn: a drawn choice left one unexercised in some runs
        if turns["evaluate"] % 2:
            tally.call("evaluate_via_index", lambda: evaluate_via_index(target, groups, **kw))
        else:
            if k is not None:
                kw["k"] = k
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

    @hypothesis_settings(max(1, -(-n // per_example)), seed)
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


def main() -> None:
    parser = argument_parser(__doc__)
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
        "command": " ".join(["python", "-m", "tests.robustness.fuzz", *sys.argv[1:]]),
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
    write_results(out, result, run=True, ensure_ascii=False)


if __name__ == "__main__":
    main()
