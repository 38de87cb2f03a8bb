"""Every user error is a QAIndexError with an exact message (API) and one line, exit 1/2 (CLI).

Reproducers of bad input, each with the message a user sees.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import qaindex.cli
from qaindex import QAIndexError, Ranker
from qaindex.corpus import read_corpus, records_from_dicts
from qaindex.eval.evaluate import evaluate_model, evaluate_via_index

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two(faq_model: Path) -> Ranker:
    """A 2-answer index."""
    return Ranker.build(
        [{"id": 1, "answer": "reset password link"}, {"id": 2, "answer": "refund order"}], model=faq_model, device="cpu"
    )


@pytest.fixture(scope="module")
def two_dir(two: Ranker, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two.save(tmp_path_factory.mktemp("ix") / "ix")


def _api_cases(faq_model: Path) -> dict[str, tuple[Callable[[Ranker], Any], str]]:
    return {
        "remove a str": (
            lambda r: r.remove("12"),
            "ids must be a list of ids, got a single str '12'; wrap it in a list, e.g. ['12']",
        ),
        "remove an int": (
            lambda r: r.remove(5),
            "ids must be a list of ids, got a single int 5; wrap it in a list, e.g. [5]",
        ),
        "remove a float id": (lambda r: r.remove([1.0]), "ids[0] must be a str or int id, got float 1.0"),
        "remove a bool id": (lambda r: r.remove([True]), "ids[0] must be a str or int id, got bool True"),
        "search_batch an int": (lambda r: r.search_batch(5), "questions must be a list of questions, got int"),
        "search_batch a str": (
            lambda r: r.search_batch("reset"),
            "search_batch takes a list of questions; use search() for one question",
        ),
        "search bytes": (lambda r: r.search(b"reset"), "the question must be text, got bytes"),
        "search k=0": (lambda r: r.search("reset", k=0), "k must be a positive integer, got 0"),
        "search k=True": (lambda r: r.search("reset", k=True), "k must be a positive integer, got True"),
        "search k float": (lambda r: r.search("reset", k=2.0), "k must be a positive integer, got 2.0"),
        "search a lone surrogate": (
            lambda r: r.search("a \ud800"),
            "questions[0] contains a lone surrogate U+D800, which is not valid Unicode; pass text decoded from valid UTF-8",
        ),
        "build batch_size=0": (
            lambda r: Ranker.build([{"answer": "a"}], model=faq_model, batch_size=0),
            "batch_size must be a positive integer, got 0",
        ),
        "build index_kind": (
            lambda r: Ranker.build([{"answer": "a"}], model=faq_model, index_kind="annoy"),
            "index_kind must be one of auto, flat, hnsw, hnsw_sq8, ivf, ivf_sq8, pq; got 'annoy'",
        ),
        "build hnsw M": (
            lambda r: Ranker.build([{"answer": "a"}], model=faq_model, hnsw={"M": 10**9}),
            "hnsw['M'] must be at most 256, got 1000000000",
        ),
        "build corpus int": (
            lambda r: Ranker.build(5, model=faq_model),
            "corpus must be a corpus file path or a list of records (dicts with an 'answer'), got int",
        ),
        "recall sample=-1": (lambda r: r.recall(sample=-1), "sample must be a positive integer, got -1"),
        "recall seed=-1": (lambda r: r.recall(seed=-1), "seed must be a non-negative integer, got -1"),
        "recall no questions": (
            lambda r: r.recall(questions=[]),
            "no questions to measure recall with; give at least one question",
        ),
        "search_vectors a str": (lambda r: r.search_vectors("abc", 1), "queries must be a numeric array, got str"),
        "search_vectors NaN": (
            lambda r: r.search_vectors(np.full((1, 6), np.nan), 1),
            "queries contains NaN or infinite values (or values too large for float32); pass finite numbers",
        ),
        "search_vectors inf": (
            lambda r: r.search_vectors(np.array([[np.inf, 0, 0, 0, 0, 0]]), 1),
            "queries contains NaN or infinite values (or values too large for float32); pass finite numbers",
        ),
        "search_vectors float64 overflow": (
            lambda r: r.search_vectors(np.full((1, 6), 1e300), 1),
            "queries contains NaN or infinite values (or values too large for float32); pass finite numbers",
        ),
        "search_vectors object dtype": (
            lambda r: r.search_vectors(np.array([[None] * 6]), 1),
            "queries must hold integers or floats, got dtype object; pass a float32 array of shape (n, 6)",
        ),
        "search_vectors complex": (
            lambda r: r.search_vectors(np.zeros((1, 6), np.complex64), 1),
            "queries must hold integers or floats, got dtype complex64; pass a float32 array of shape (n, 6)",
        ),
        "search_vectors wrong shape": (
            lambda r: r.search_vectors(np.zeros((1, 5)), 1),
            "queries must have shape (n, 6), got (1, 5)",
        ),
        "search_vectors outside the ball": (
            lambda r: r.search_vectors(np.full((1, 6), 0.5), 1),
            "queries has vectors of norm >= 1, outside the Poincaré ball; use vectors from model.encode()",
        ),
        "candidates m=0": (lambda r: r.candidates(np.zeros((1, 6)), 0), "m must be a positive integer, got 0"),
        "configure huge overfetch": (
            lambda r: r.configure(overfetch=10**30),
            "overfetch must be at most 1,048,576, got 1000000000000000000000000000000",
        ),
        "configure ef_search str": (
            lambda r: r.configure(ef_search="9"),
            "ef_search must be a positive integer, got '9'",
        ),
        "get a float": (lambda r: r.get(1.5), "id must be a str or int, got float 1.5"),
        "add a dict": (
            lambda r: r.add({"answer": "x"}),
            "records must be a corpus file path or a list of records (dicts with an 'answer'), got dict",
        ),
        "add batch_size": (
            lambda r: r.add([{"answer": "x"}], batch_size=-2),
            "batch_size must be a positive integer, got -2",
        ),
        "encode a str": (
            lambda r: r.model.encode("abc", role="question"),
            "texts must be a list of texts, got a single str; wrap it in a list",
        ),
        "encode a role": (lambda r: r.model.encode(["abc"], role="x"), "role must be one of question, answer; got 'x'"),
        "encode None item": (
            lambda r: r.model.encode(["a", None], role="answer"),
            "texts[1] must be a text (str), got NoneType None",
        ),
        "encode progress": (
            lambda r: r.model.encode(["a"], role="answer", progress=3),
            "progress must be a function or None, got int",
        ),
        "score shapes": (
            lambda r: r.model.score(np.zeros((1, 6)), np.zeros((2, 3, 6))),
            "candidates must have shape (1, n, 6), got (2, 3, 6)",
        ),
        "score NaN": (
            lambda r: r.model.score(np.zeros((1, 6)), np.full((1, 3, 6), np.nan)),
            "candidates contains NaN or infinite values (or values too large for float32); pass finite numbers",
        ),
        "evaluate a str": (
            lambda r: evaluate_model(r.model, "data.jsonl"),
            "groups must be a list of QuestionGroup (from read_labelled), got str",
        ),
        "evaluate a model path": (
            lambda r: evaluate_via_index("model", []),
            "model must be a loaded Model (Model.load(path)), got str",
        ),
        "evaluate batch_size": (
            lambda r: evaluate_model(r.model, [], batch_size=0),
            "batch_size must be a positive integer, got 0",
        ),
    }


def test_api_errors_are_qaindex_errors_with_exact_messages(two: Ranker, faq_model: Path) -> None:
    for name, (call, message) in _api_cases(faq_model).items():
        with pytest.raises(QAIndexError) as info:
            call(two)
        assert str(info.value) == message, name
    assert len(two) == 2  # nothing was removed or added by the refused calls


def test_huge_k_is_bounded_by_the_index_size(two: Ranker) -> None:
    # an (n, k) allocation for these k would fail; the result is what k = len(index) gives
    full = two.search("reset password", k=2)
    assert [h.id for h in full] == [h.id for h in two.search("reset password", k=10**9)]
    assert two.search_batch(["refund", "reset"], k=10**30) == two.search_batch(["refund", "reset"], k=2)
    qv = two.model.encode(["refund"], role="question")
    for k in (2, 3, 10**18, 99999999999999999999):
        scores, dists, rows = two.search_vectors(qv, k)
        assert scores.shape == dists.shape == rows.shape == (1, 2)
    assert two.candidates(qv, 10**20).shape == (1, 2)
    assert two.recall(10**12, questions=["refund"])["k"] == 2


def test_remove_a_list_of_one_id_still_works(faq_model: Path) -> None:
    r = Ranker.build([{"id": i, "answer": f"answer {i}"} for i in (1, 2, 12)], model=faq_model, device="cpu")
    assert r.remove(("12",)) == 1
    assert sorted(rec.id for rec in r.records()) == [1, 2]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"answer": "a \\ud800"}',
            'field "answer" contains a lone surrogate \\ud800, which is not valid Unicode and cannot be stored as UTF-8; fix or remove that escape',
        ),
        (
            '{"answer": "a", "tags": ["x", "\\udfff"]}',
            'field "tags[1]" contains a lone surrogate \\udfff, which is not valid Unicode and cannot be stored as UTF-8; fix or remove that escape',
        ),
        (
            '{"answer": "a", "m": {"\\ud83d": 1}}',
            'key "\\ud83d" of field "m" contains a lone surrogate \\ud83d, which is not valid Unicode; fix or remove that escape',
        ),
        (
            '{"answer": "a", "score": NaN}',
            'field "score" is NaN, which is not valid JSON; use null or a string instead',
        ),
        (
            '{"answer": "a", "m": {"x": [1, -Infinity]}}',
            'field "m.x[1]" is -Infinity, which is not valid JSON; use null or a string instead',
        ),
        ('{"answer": "a", "x": 1e999}', 'field "x" is Infinity, which is not valid JSON; use null or a string instead'),
        ('{"answer": "a", "id": true}', 'field "id" must be a string or an integer, got true'),
        ('{"answer": "a", "id": 1.5}', 'field "id" must be a string or an integer, got 1.5'),
        ('{"answer": "a", "id": ""}', 'field "id" is empty; give a non-empty id or leave it out'),
        (
            '{"answer": "a", "id": 9223372036854775808}',
            'field "id" is an integer outside the 64-bit range; use a string id instead',
        ),
        (
            '{"qid": 1, "question": "q", "answer": "a", "aid": 1.0, "label": 0}',
            'field "aid" must be a string or an integer, got 1.0',
        ),
        (
            '{"qid": 1, "question": "q", "answer": "a", "aid": "x", "label": true}',
            'field "label" must be 0 or 1, got true',
        ),
        (
            '{"answer": "a", "m": ' + "[" * 70 + "]" * 70 + "}",
            'field "m" is nested more than 64 levels deep; flatten it',
        ),
        (
            '{"answer": ' + "[" * 100000 + "]" * 100000 + "}",
            "nested too deeply to read (more than 64 levels allowed); flatten it",
        ),
        (
            '{"answer": "a", "n": ' + "9" * 5000 + "}",
            "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit); store huge numbers as strings",
        ),
    ],
)
def test_corpus_lines_refused_with_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"answer": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(QAIndexError) as info:
        read_corpus(path)
    assert str(info.value) == f"{path}:2: {message}"


def test_ids_that_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    lines = ['{"id": -9223372036854775808, "answer": "a"}', '{"id": " x ", "answer": "b"}', '{"id": 0, "answer": "c"}']
    path.write_text("\n".join(lines), encoding="utf-8")
    assert [r.id for r in read_corpus(path)] == [-(2**63), " x ", 0]


def test_in_memory_records_must_be_json(tmp_path: Path, faq_model: Path) -> None:
    cyclic: dict[str, Any] = {"answer": "a"}
    cyclic["self"] = [cyclic]
    cases = [
        (
            {"answer": "a", "x": float("nan")},
            'records[1]: field "x" is NaN, which is not valid JSON; use null or a string instead',
        ),
        (
            {"answer": "a", "x": {1, 2}},
            "records[1]: cannot be stored as JSON (Object of type set is not JSON serializable); use str, int, float, bool, None, list or dict",
        ),
        (
            cyclic,
            "records[1]: cannot be stored as JSON (Circular reference detected); use str, int, float, bool, None, list or dict",
        ),
        (
            {"answer": "a", "id": 2**64},
            'records[1]: field "id" is an integer outside the 64-bit range; use a string id instead',
        ),
    ]
    for record, message in cases:
        with pytest.raises(QAIndexError) as info:
            records_from_dicts([record])
        assert str(info.value) == message
    with pytest.raises(QAIndexError, match=r"^read_corpus takes a file path, got int$"):
        read_corpus(3)  # type: ignore[arg-type]
    with pytest.raises(QAIndexError, match=r"^existing_ids must be a list of ids, got str$"):
        read_corpus(tmp_path / "c.jsonl", existing_ids="12")
    with pytest.raises(QAIndexError, match=r"^groups\[0\] must be a QuestionGroup \(from read_labelled\), got dict$"):
        evaluate_model(Ranker.build([{"answer": "a"}], model=faq_model, device="cpu").model, [{"question": "q"}])


# -- CLI -------------------------------------------------------------------------------------


def _one_clean_line(result: Any, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_cli_huge_k(two_dir: Path) -> None:
    runner = CliRunner()
    for k in ("1000000000", "99999999999999999999"):
        res = runner.invoke(qaindex.cli.main, ["search", "reset password", "--index", str(two_dir), "-k", k, "--json"])
        assert res.exit_code == 0, res.output
        assert len(json.loads(res.stdout)["hits"]) == 2


def test_cli_bad_index_paths(two_dir: Path, faq_model: Path, faq_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(qaindex.cli.main, ["search", "reset", "--index", "/proc/foo"])
    assert (
        _one_clean_line(res)
        == "Error: /proc/foo: no index here; build one with `qaindex build CORPUS.jsonl --index /proc/foo`"
    )
    build = ["build", str(faq_file), "--model", str(faq_model), "--device", "cpu", "--index"]
    res = runner.invoke(qaindex.cli.main, [*build, "/proc/foo"])
    assert (
        _one_clean_line(res)
        == "Error: /proc/foo: cannot create the index directory (No such file or directory); choose another --index path"
    )
    res = runner.invoke(qaindex.cli.main, [*build, str(faq_file / "ix")])
    assert (
        _one_clean_line(res)
        == f"Error: {faq_file / 'ix'}: cannot create the index directory (Not a directory); choose another --index path"
    )
    res = runner.invoke(qaindex.cli.main, [*build, str(faq_file)])
    assert res.exit_code == 2 and f"Directory '{faq_file}' is a file." in res.stderr
    res = runner.invoke(qaindex.cli.main, ["add", str(faq_file), "--index", str(tmp_path / "nothing")])
    assert _one_clean_line(res).startswith(f"Error: {tmp_path / 'nothing'}: no index here;")


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (
            PermissionError(13, "Permission denied", "/srv/ix/manifest.json"),
            "/srv/ix/manifest.json: Permission denied; check the path and its permissions",
        ),
        (
            OSError(28, "No space left on device", "/srv/ix"),
            "/srv/ix: no space left on the device; free some space and retry",
        ),
        (MemoryError(), "out of memory; use a smaller -k, --batch-size or corpus"),
        (
            UnicodeEncodeError("ascii", "é", 0, 1, "ordinal not in range(128)"),
            "text cannot be encoded or decoded ('ascii' codec can't encode character '\\xe9' in position 0: ordinal not in range(128)); use UTF-8 (e.g. set PYTHONIOENCODING=utf-8)",
        ),
        (RecursionError(), "input nested too deeply; flatten it"),
        (
            RuntimeError("boom\nsecond line"),
            "unexpected internal error (RuntimeError: boom second line); please report this bug",
        ),
    ],
)
def test_cli_last_resort_is_one_line(
    monkeypatch: pytest.MonkeyPatch, two_dir: Path, exc: BaseException, message: str
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(qaindex.cli.app.Ranker, "load", fail)
    monkeypatch.delenv("QAINDEX_DEBUG", raising=False)
    res = CliRunner().invoke(qaindex.cli.main, ["search", "reset", "--index", str(two_dir)])
    assert _one_clean_line(res) == f"Error: {message}"


def test_cli_corpus_errors_are_one_line(faq_model: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"answer": ' + "[" * 100000 + "]" * 100000 + "}\n", encoding="utf-8")
    res = runner.invoke(
        qaindex.cli.main, ["build", str(deep), "--model", str(faq_model), "--index", str(tmp_path / "i")]
    )
    assert (
        _one_clean_line(res) == f"Error: {deep}:1: nested too deeply to read (more than 64 levels allowed); flatten it"
    )
    sur = tmp_path / "s.jsonl"
    sur.write_text('{"answer": "a \\ud800"}\n', encoding="utf-8")
    res = runner.invoke(
        qaindex.cli.main, ["build", str(sur), "--model", str(faq_model), "--index", str(tmp_path / "i")]
    )
    assert _one_clean_line(res).startswith(f'Error: {sur}:1: field "answer" contains a lone surrogate \\ud800')
    assert not (tmp_path / "i").exists()


def test_cli_build_of_an_endless_input_stops_naming_its_line(
    faq_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /dev/zero never ends and has no newline: neither the progress bar's line count nor
    # the reader may read it to its end
    import qaindex.indexing.streaming

    counted: list[int | None] = []
    count_lines = qaindex.indexing.streaming.count_lines
    monkeypatch.setattr(
        qaindex.indexing.streaming, "count_lines", lambda p: counted.append(count_lines(p)) or counted[-1]
    )
    res = CliRunner().invoke(
        qaindex.cli.main, ["build", "/dev/zero", "--model", str(faq_model), "--index", str(tmp_path / "i")]
    )
    assert res.exit_code == 1 and counted == [None]
    assert _one_clean_line(res) == (
        "Error: /dev/zero:1: line longer than 67,108,864 bytes, the most one line may hold (is this a JSONL "
        "file?); split or shorten the answer"
    )
    assert not (tmp_path / "i").exists()


def test_cli_stdin_and_argv_encoding(two_dir: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(qaindex.cli.main, ["search", "-", "--index", str(two_dir)], input=b"reset \xff\n")
    assert _one_clean_line(res) == "Error: stdin: not valid UTF-8 (byte 0xff at offset 6); send UTF-8 text"
    # invalid UTF-8 in argv arrives as a lone surrogate (surrogateescape)
    res = runner.invoke(qaindex.cli.main, ["search", "reset \udcff", "--index", str(two_dir)])
    assert _one_clean_line(res) == (
        "Error: questions[0] contains a lone surrogate U+DCFF, which is not valid Unicode; "
        "pass text decoded from valid UTF-8"
    )


def test_cli_json_output_is_strict(faq_model: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"answer": "reset password", "m": {"x": null, "y": 1.5e300, "z": "é\\u2028"}}\n', encoding="utf-8"
    )
    runner = CliRunner()
    res = runner.invoke(
        qaindex.cli.main, ["build", str(corpus), "--model", str(faq_model), "--index", str(tmp_path / "i")]
    )
    assert res.exit_code == 0, res.output

    def refuse(name: str) -> Any:
        raise AssertionError(f"non-strict JSON constant {name}")

    res = runner.invoke(qaindex.cli.main, ["search", "reset", "--index", str(tmp_path / "i"), "--json"])
    hit = json.loads(res.stdout, parse_constant=refuse)["hits"][0]
    assert hit["metadata"] == {"m": {"x": None, "y": 1.5e300, "z": "é\u2028"}}


def test_real_subprocess_never_prints_a_traceback(two_dir: Path, tmp_path: Path) -> None:
    exe = [sys.executable, "-m", "qaindex.cli"]
    cases = [
        (["search", "reset", "--index", str(two_dir), "-k", "99999999999999999999"], 0),
        (["search", "reset", "--index", "/proc/foo"], 1),
        (["search", "", "--index", str(two_dir)], 1),
        (["search", "reset", "-k", "0", "--index", str(two_dir)], 2),
        (["remove", "nope", "--index", str(two_dir)], 1),
        (["build", "/proc/foo/c.jsonl", "--index", str(tmp_path / "x")], 1),
    ]
    for args, code in cases:
        proc = subprocess.run([*exe, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, (args, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        if code:
            assert re.fullmatch(r"(?s)(Usage:.*\n)?Error: [^\n]+\n", proc.stderr), proc.stderr


# -- no pickle ----------------------------------------------------------------------------------

_PICKLE = re.compile(
    r"\bimport pickle\b|\bfrom pickle\b|\bpickle\.(loads?|dumps?|Unpickler|Pickler)\b|\bcPickle\b|\bdill\b|torch\.load\(|allow_pickle=True|weights_only=False"
)


def test_no_pickle_in_the_repository() -> None:
    found = []
    for path in sorted(ROOT.glob("**/*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or "site-packages" in rel.parts or rel == Path("tests/cli/test_inputs.py"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if _PICKLE.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert found == []


def test_doctests_of_the_argument_checks() -> None:
    import doctest

    import qaindex.checks
    import qaindex.corpus

    for module in (qaindex.checks, qaindex.cli.app, qaindex.corpus):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def _boundary_cases(index: Path, faq_model: Path) -> dict[str, tuple[Callable[[Ranker], Any], str]]:
    """The argument fuzz's reproducers: each was a TypeError, ValueError or OSError, or accepted."""
    from qaindex import Model, Reranker
    from qaindex.checks import max_threads

    cap = max_threads()
    threads = f"threads must be None (every core) or an integer from 1 to {cap} (4 per core of this machine), got "
    long_name = "x" * 300
    return {
        "load a dict": (
            lambda r: Ranker.load({}),  # type: ignore[arg-type]
            "path must be an index directory (str or pathlib.Path), got dict {}",
        ),
        "load bytes": (
            lambda r: Ranker.load(b"idx"),  # type: ignore[arg-type]
            "path must be an index directory as str or pathlib.Path, got bytes b'idx'; decode it",
        ),
        "edit an int": (
            lambda r: Ranker.edit(1000000000).__enter__(),  # type: ignore[arg-type]
            "path must be an index directory (str or pathlib.Path), got int 1000000000",
        ),
        "save a long name": (
            lambda r: r.save("d/" + long_name),
            f"path has a component of 300 bytes ('{'x' * 56}...); a file or folder name is at most 255 bytes",
        ),
        "load a long name": (
            lambda r: Ranker.load(long_name),
            f"path has a component of 300 bytes ('{'x' * 56}...); a file or folder name is at most 255 bytes",
        ),
        "load a long path": (
            lambda r: Ranker.load("/".join(["y" * 200] * 25)),
            f"path is 5,024 bytes long ('{'y' * 56}...); paths are at most 4,096 bytes",
        ),
        "save a lone surrogate": (
            lambda r: r.save("ix-\udcff"),
            "path is not valid UTF-8 text ('ix-\\udcff'); use a path of valid characters",
        ),
        "save a NUL": (lambda r: r.save("a\0b"), "path contains a NUL character: 'a\\x00b'; a path cannot contain one"),
        "save overwrite array": (
            lambda r: r.save(index, overwrite=np.array([True, False])),  # type: ignore[arg-type]
            "overwrite must be True or False, got ndarray array([ True, False])",
        ),
        "hits ragged": (
            lambda r: r.hits([[1.0], [2.0, 3.0]], [[1.0], [2.0, 3.0]], [[0], [1, 0]]),
            "scores must be a 2-D numeric array (rows of equal length), got a ragged list",
        ),
        "hits float rows": (
            lambda r: r.hits([[1.0]], [[1.0]], [[0.5]]),
            "rows must hold integers, got dtype float64",
        ),
        "min_score 10**400": (
            lambda r: r.search("reset", min_score=10**400),
            f"min_score must be a finite number or None, got {str(10**400)[:57]}...",
        ),
        "min_score a str": (
            lambda r: r.search("reset", min_score="1"),
            "min_score must be a finite number or None, got '1'",
        ),
        "verify an array": (
            lambda r: Ranker.load(index, verify=np.array([1, 2])),  # type: ignore[arg-type]
            'verify must be True, False, "lazy" or "full", got ndarray array([1, 2])',
        ),
        "add a 0-d array": (
            lambda r: r.add(np.array(0)),  # type: ignore[arg-type]
            "records must be a corpus file path or a list of records (dicts with an 'answer'), got an array of shape ()",
        ),
        "threads=-1": (lambda r: Ranker.load(index, threads=-1), threads + "-1"),
        "threads=0": (lambda r: Model.load(faq_model, threads=0), threads + "0"),
        "threads=1000": (lambda r: Ranker.load(index, threads=1000), threads + "1000"),
        "threads=10**9": (lambda r: Ranker.edit(index, threads=10**9).__enter__(), threads + "1000000000"),
        "threads a float": (lambda r: Model.load(faq_model, threads=2.0), threads + "2.0"),  # type: ignore[arg-type]
        "device a list": (
            lambda r: Ranker.load(index, device=["cpu"]),  # type: ignore[arg-type]
            "unknown device ['cpu']; choose one of: auto, cpu, cuda",
        ),
        "model path with NUL": (
            lambda r: Ranker.build([{"answer": "a"}], model="m\0"),
            "model contains a NUL character: 'm\\x00'; a path cannot contain one",
        ),
        "read_corpus a long name": (
            lambda r: read_corpus(long_name),
            f"path has a component of 300 bytes ('{'x' * 56}...); a file or folder name is at most 255 bytes",
        ),
        "reranker bytes path": (
            lambda r: Reranker.load("r\0"),
            "path contains a NUL character: 'r\\x00'; a path cannot contain one",
        ),
        "model read_manifest verify": (
            lambda r: Model.read_manifest(faq_model, verify="yes"),  # type: ignore[arg-type]
            "verify must be True or False, got str 'yes'",
        ),
        "build recall 10**400": (
            lambda r: Ranker.build([{"answer": "a"}], model=faq_model, recall=10**400),
            f"recall must be a number above 0 and at most 1 (e.g. 0.99), got {str(10**400)[:57]}...",
        ),
        "read_labelled a dict": (
            lambda r: _read_labelled({}),
            "path must be a data file path (str or pathlib.Path), got dict {}",
        ),
        "pooled k": (lambda r: _pooled([[0]], [[0]], k=0), "k must be a positive integer, got 0"),
        "pooled row": (
            lambda r: _pooled([["a"]], [[0]]),
            "rankings[0][0] must be an integer answer row, got str 'a'",
        ),
        "pooled lengths": (
            lambda r: _pooled([[0]], []),
            "1 rankings for 0 questions; give one ranking per question",
        ),
    }


def _read_labelled(path: Any) -> Any:
    from qaindex.eval.datasets import read_labelled

    return read_labelled(path)


def _pooled(*args: Any, **kwargs: Any) -> Any:
    from qaindex.eval.evaluate import pooled_metrics

    return pooled_metrics(*args, **kwargs)


def test_argument_boundary_refuses_with_a_qaindex_error(two: Ranker, two_dir: Path, faq_model: Path) -> None:
    before = sorted(p.name for p in two_dir.iterdir())
    for name, (call, message) in _boundary_cases(two_dir, faq_model).items():
        with pytest.raises(QAIndexError) as info:
            call(two)
        assert str(info.value) == message, name
    assert sorted(p.name for p in two_dir.iterdir()) == before  # nothing written by a refused save
    assert len(two) == 2


def test_accepted_edge_values(two: Ranker, two_dir: Path, faq_model: Path) -> None:
    from qaindex import Model
    from qaindex.checks import max_threads

    assert two.search("reset", min_score=10**100) == []  # a finite bound nothing reaches
    assert two.search("reset", min_score=np.float32(-1e30)) == two.search("reset")
    assert Ranker.load(two_dir, threads=max_threads(), verify=np.bool_(False)).search("reset") == two.search("reset")
    assert Model.load(faq_model, threads=None).dimension == 6
    hits = two.hits(np.zeros((1, 2)), np.zeros((1, 2)), np.array([[1, -1]], dtype=np.int32))
    assert [h.row for h in hits[0]] == [1]
