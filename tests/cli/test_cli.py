"""The CLI through click's CliRunner: outputs, exit codes and exact error messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qaindex.cli import main


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


def build(runner: CliRunner, faq_file: Path, faq_model: Path, index: Path, *extra: str) -> None:
    # --device cpu: the line below names the devices, which --device auto picks per machine
    args = ["build", str(faq_file), "--model", str(faq_model), "--index", str(index), "--device", "cpu", *extra]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"indexed 5 answers into {index}: dimension 6, flat index, model tiny-test-model, ")
    assert "onnxruntime on CPUExecutionProvider, faiss on cpu" in result.stdout


def test_build_search_info(runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    res = runner.invoke(main, ["search", "how do I reset my password", "--index", str(index), "-k", "3"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["#", "score", "id", "metadata", "answer"]  # the distance is in --json only
    assert len(lines) == 4 and lines[1].split()[:4] == ["1", lines[1].split()[1], "reset", "category=account"]
    assert lines[1].split("category=account  ")[1].startswith("Open settings and choose reset password")

    res = runner.invoke(main, ["search", "how do I reset my password", "--index", str(index), "-k", "2", "--json"])
    assert res.exit_code == 0
    obj = json.loads(res.stdout)
    assert obj["question"] == "how do I reset my password"
    assert len(obj["hits"]) == 2 and set(obj["hits"][0]) == {
        "id",
        "answer",
        "score",
        "raw_score",
        "distance",
        "metadata",
        "matched",
    }
    assert obj["hits"][0]["score"] >= obj["hits"][1]["score"]
    assert (obj["hits"][0]["id"], obj["hits"][0]["matched"]) == ("reset", "question")  # its stored question

    res = runner.invoke(main, ["info", "--index", str(index), "--recall", "-k", "3", "--verify"])
    assert res.exit_code == 0, res.output
    assert "answers:    5" in res.stdout
    assert "recall@3:  1.0000 (coarse stage 1.0000, 5 candidates, 2 stored questions)" in res.stdout
    assert "verified:   every file matches its checksum; every record and vector checked" in res.stdout
    res = runner.invoke(main, ["info", "--index", str(index), "--json"])
    assert json.loads(res.stdout)["index"]["kind"] == "flat"


def test_table_without_metadata_and_empty_results(
    runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path
) -> None:
    index = tmp_path / "ix"
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"id": "a", "answer": "Sync runs every five minutes."}\n', encoding="utf-8")
    res = runner.invoke(main, ["build", str(plain), "--model", str(faq_model), "--index", str(index)])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"indexed 1 answer into {index}")
    assert "near the ball's centre" not in res.stdout  # printed only when some answers are
    res = runner.invoke(main, ["search", "sync", "--index", str(index)])
    assert res.stdout.splitlines()[0].split() == ["#", "score", "id", "answer"]
    index = tmp_path / "faq"
    build(runner, faq_file, faq_model, index)
    args = ["search", "refund", "--index", str(index)]
    res = runner.invoke(main, [*args, "--min-score", "1"])
    assert res.exit_code == 0 and res.stdout == "no answer with a score of at least 1 (--min-score)\n"
    res = runner.invoke(main, [*args, "--where", "category=nothing"])
    assert res.exit_code == 0 and res.stdout == "no answer matches --where\n"
    res = runner.invoke(main, [*args, "--where", "category=billing", "--min-score", "1"])
    assert res.stdout == "no answer matching --where with a score of at least 1 (--min-score)\n"
    res = runner.invoke(main, [*args, "--where", "category=nothing", "--json"])
    assert json.loads(res.stdout)["hits"] == []


def test_search_explain_shows_the_dense_part(
    runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path
) -> None:
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    args = ["search", "how do I reset my password", "--index", str(index), "-k", "2", "--no-hybrid", "--explain"]
    res = runner.invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    for rank, hit in enumerate(hits, start=1):
        assert hit["explanation"] == {
            "key": hit["matched"],
            "dense_score": hit["raw_score"],
            "dense_rank": rank,
            "bm25_score": None,
            "bm25_rank": None,
            "matched_terms": [],
            "fused": None,
            "dense_weight": None,
            "question_top": None,
            "question_coverage": None,
            "question_match": None,
        }
    table = runner.invoke(main, args)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert len(lines) == 1 + 2 * 2
    assert hits[0]["matched"] == "question"  # a stored question of the record, worded alike
    assert lines[2].split() == ["dense", f"{hits[0]['raw_score']:.4f}", "(#1)", "key", "question"]


def test_search_reads_stdin_and_env_index(
    runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    monkeypatch.setenv("QAINDEX_INDEX", str(index))
    res = runner.invoke(main, ["search", "-", "--json", "-k", "1"], input="refund\n\nexport notes 🙂\n")
    assert res.exit_code == 0, res.output
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    assert [o["question"] for o in objs] == ["refund", "export notes 🙂"]
    assert all(len(o["hits"]) == 1 for o in objs)


def test_default_index_path_in_cwd(
    runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(main, ["build", str(faq_file), "--model", str(faq_model)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "qaindex-index" / "manifest.json").is_file()
    res = runner.invoke(main, ["search", "refund"])
    assert res.exit_code == 0 and res.stdout.count("\n") == 6


def test_add_and_remove_commands(runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    more = tmp_path / "more.jsonl"
    more.write_text('{"id": "m1", "answer": "More."}\n', encoding="utf-8")
    res = runner.invoke(main, ["add", str(more), "--index", str(index)])
    assert res.exit_code == 0 and res.stdout == f"added 1 answer; 6 in {index}\n"
    res = runner.invoke(main, ["add", str(more), "--index", str(index)])
    assert res.exit_code == 1
    assert res.stderr == f'Error: {more}:1: id "m1" is already in the index; remove it first or use another id\n'
    more.write_text('{"id": "m1", "answer": "More, changed."}\n{"id": "m2", "answer": "Two."}\n', encoding="utf-8")
    res = runner.invoke(main, ["add", str(more), "--upsert", "--index", str(index)])
    assert res.exit_code == 0 and res.stdout == f"added 1 answer, replaced 1 answer; 7 in {index}\n"
    res = runner.invoke(main, ["search", "changed", "--index", str(index), "--json", "-k", "7"])
    assert {h["id"]: h["answer"] for h in json.loads(res.stdout)["hits"]}["m1"] == "More, changed."
    more.write_text('{"id": "m2", "answer": "Two again."}\n{"answer": "no id"}\n', encoding="utf-8")
    res = runner.invoke(main, ["add", str(more), "--upsert", "--index", str(index)])
    assert res.exit_code == 1
    assert (
        res.stderr
        == f'Error: {more}:2: upsert replaces answers by id; give this answer an "id", or add it with `add`\n'
    )
    res = runner.invoke(main, ["remove", "m2", "--index", str(index)])  # the refused upsert changed nothing
    assert res.exit_code == 0 and res.stdout == f"removed 1 answer; 6 left in {index}\n"
    res = runner.invoke(main, ["remove", "m1", "7", "--index", str(index)])
    assert res.exit_code == 0 and res.stdout == f"removed 2 answers; 4 left in {index}\n"
    res = runner.invoke(main, ["remove", "export", "--index", str(index)])
    assert res.exit_code == 0 and res.stdout == f"removed 1 answer; 3 left in {index}\n"
    res = runner.invoke(main, ["remove", "zzz", "--index", str(index)])
    assert res.exit_code == 1 and res.stderr == 'Error: no answer with id "zzz" in the index; nothing was removed\n'


BAD_CORPORA = [
    (
        '{"answer": "ok"}\n{oops}\n',
        "{p}:2: not valid JSON (Expecting property name enclosed in double quotes at column 2); each line must be one JSON object",
    ),
    ('{"answer": "ok"}\n{"id": 3}\n', '{p}:2: field "answer" is missing; every record needs a non-empty "answer" text'),
    ('{"answer": ""}\n', '{p}:1: field "answer" is empty; give it the answer text or drop the line'),
    (
        '{"id": "a", "answer": "x"}\n{"id": "a", "answer": "y"}\n',
        '{p}:2: duplicate id "a" (first seen at {p}:1); ids must be unique',
    ),
    ("", '{p}: no answers found; write one JSON object per line with an "answer" field'),
]


@pytest.mark.parametrize(("content", "message"), BAD_CORPORA)
def test_build_errors_keep_existing_index(
    runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path, content: str, message: str
) -> None:
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    before = (index / "manifest.json").read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    res = runner.invoke(main, ["build", str(bad), "--model", str(faq_model), "--index", str(index), "--force"])
    assert res.exit_code == 1
    assert res.stderr == "Error: " + message.replace("{p}", str(bad)) + "\n"
    assert "Traceback" not in res.output
    assert (index / "manifest.json").read_bytes() == before
    assert runner.invoke(main, ["search", "refund", "--index", str(index)]).exit_code == 0


def test_invalid_utf8_corpus(runner: CliRunner, faq_model: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"answer": "\xff"}\n')
    res = runner.invoke(main, ["build", str(bad), "--model", str(faq_model), "--index", str(tmp_path / "ix")])
    assert res.exit_code == 1
    assert res.stderr == f"Error: {bad}:1: not valid UTF-8 (byte 0xff at column 13); save the file as UTF-8\n"
    assert not (tmp_path / "ix").exists()


def test_missing_and_corrupted_index(runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nothing"
    res = runner.invoke(main, ["search", "hello", "--index", str(missing)])
    assert res.exit_code == 1
    assert (
        res.stderr
        == f"Error: {missing}: no index here; build one with `qaindex build CORPUS.jsonl --index {missing}`\n"
    )
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    manifest = json.loads((index / "manifest.json").read_text())
    (index / manifest["snapshot"] / "records.jsonl").write_bytes(b"garbage")
    res = runner.invoke(main, ["info", "--index", str(index)])
    assert res.exit_code == 1
    assert res.stderr.startswith(
        f"Error: {index / manifest['snapshot'] / 'records.jsonl'}: has 7 bytes, the manifest says "
    )
    manifest["format_version"] = 7
    (index / "manifest.json").write_text(json.dumps(manifest))
    res = runner.invoke(main, ["search", "hello", "--index", str(index)])
    assert res.exit_code == 1
    assert res.stderr == (
        f"Error: {index / 'manifest.json'}: index format version 7 is not supported by this qaindex "
        "(it reads version 1); upgrade qaindex or rebuild the index\n"
    )


def test_empty_question_and_usage_errors(runner: CliRunner, faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    index = tmp_path / "ix"
    build(runner, faq_file, faq_model, index)
    res = runner.invoke(main, ["search", "  ", "--index", str(index)])
    assert res.exit_code == 1
    assert res.stderr == "Error: the question is empty; ask a question with at least one word\n"
    res = runner.invoke(main, ["search", "-", "--index", str(index)], input="\n\n")
    assert res.exit_code == 1 and res.stderr == "Error: no questions on stdin; give one question per line\n"
    res = runner.invoke(main, ["search", "x", "-k", "0", "--index", str(index)])
    assert res.exit_code == 2 and "Invalid value for '-k'" in res.stderr
    res = runner.invoke(main, ["build"])
    assert res.exit_code == 2 and "Missing argument 'CORPUS'" in res.stderr
    res = runner.invoke(main, ["search", "x", "--device", "tpu", "--index", str(index)])
    assert res.exit_code == 2 and "'tpu' is not one of 'auto', 'cpu', 'cuda'" in res.stderr


def test_missing_model_dir(runner: CliRunner, faq_file: Path, tmp_path: Path) -> None:
    res = runner.invoke(
        main, ["build", str(faq_file), "--model", str(tmp_path / "nomodel"), "--index", str(tmp_path / "ix")]
    )
    assert res.exit_code == 1
    assert res.stderr == f"Error: {tmp_path / 'nomodel'}: no such model directory\n"


def test_import_qaindex_does_not_import_torch() -> None:
    code = (
        "import sys, qaindex, qaindex.cli, qaindex.ranker, qaindex.model; "
        "heavy = [m for m in ('torch', 'onnx', 'qaindex_export.training.train', 'qaindex_export.networks.models') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_console_script_help() -> None:
    out = subprocess.run([sys.executable, "-m", "qaindex.cli", "--help"], capture_output=True, text=True, check=True)
    for command in ("build", "search", "info", "add", "remove"):
        assert command in out.stdout


def test_train_help_shows_the_first_options_and_help_all_every_one(runner: CliRunner) -> None:
    pytest.importorskip("qaindex_export")
    import click

    from qaindex.cli.train import train

    def listed(text: str) -> set[str]:
        return {line.split()[0].rstrip(",") for line in text.splitlines() if line.startswith("  -")}

    short = runner.invoke(main, ["train", "--help"])
    assert short.exit_code == 0
    assert listed(short.stdout) == {
        "--dev", "--out", "--config", "--teacher", "--start", "--from-scratch", "--model", "--epochs",
        "--seed", "--device", "--name", "--quiet", "--help-all", "-h",
    }  # fmt: skip
    assert "--epochs INTEGER                Training epochs. [default: 12 when adapting" in short.stdout
    everything = runner.invoke(main, ["train", "--help-all"])
    assert everything.exit_code == 0
    options = [p for p in train.params if isinstance(p, click.Option)]
    assert listed(everything.stdout) == {p.opts[0] for p in options} | {"-h"}
    assert len(options) > 50
    assert runner.invoke(main, ["train", "--help"]).stdout == short.stdout  # --help-all left --help as it was
    # every option, shown or not, is still parsed
    for p in options:
        if p.is_eager:
            continue
        if p.is_flag:
            args = [p.opts[0]]
        elif isinstance(p.type, click.Choice):
            args = [p.opts[0], str(p.type.choices[-1])]
        else:
            args = [p.opts[0], {"integer": "3", "float": "0.5"}.get(p.type.name, "x")]
        ctx = train.make_context("train", ["data.jsonl", "--out", "m", *args])
        assert ctx.params[p.name] is not None, p.name
