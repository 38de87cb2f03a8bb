"""Inputs of :mod:`tests.robustness.fuzz`: the tiny world (model, corpus, index), hypothesis strategies, the tally."""

from __future__ import annotations

import collections
import json
import math
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qaindex import QAIndexError, Ranker
from qaindex.model import Model
from qaindex.text.tokenizer import Tokenizer
from tests.helpers.onnx_models import make_model

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


def hypothesis_settings(n: int, seed: int) -> Any:
    """Hypothesis settings of one fuzz run: ``n`` generated examples, no shrinking, no example database."""
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
