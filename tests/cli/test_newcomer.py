"""What a newcomer meets in the first hour: the built-in model by name, ``-v``, whole ids,
id-less answers added twice, ``build`` over an index, progress totals, config type errors,
training hints, and the held-out dev split's ONNX metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FAQ

import qaindex
from qaindex import CorpusError, Ranker
from qaindex.cli import main
from qaindex.model import DEFAULT_MODEL_DIR, resolve_model_path

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _build(faq_file: Path, faq_model: Path, index: Path, *extra: str) -> str:
    args = ["build", str(faq_file), "--model", str(faq_model), "--index", str(index), "--device", "cpu", *extra]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return res.stdout


# -- the built-in model by name ------------------------------------------------------------------------


def test_the_word_default_names_the_built_in_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_model_path("default") == resolve_model_path(None) == DEFAULT_MODEL_DIR
    monkeypatch.chdir(tmp_path)  # a directory called default is ./default, never the built-in model
    assert resolve_model_path("./default") == Path("default")
    assert resolve_model_path(Path("default")) == Path("default")


def test_eval_and_inspect_accept_default(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "test.jsonl",
        [
            {
                "id": "reset",
                "answer": "Use the reset link on the sign-in page.",
                "question": "how do I reset my password",
            },
            {"id": "refund", "answer": "Refunds are paid within 14 days.", "question": "can I get my money back"},
            {"id": "dark", "answer": "Dark mode is under Settings, Appearance."},
        ],
    )
    runner = CliRunner()
    res = runner.invoke(main, ["eval", "default", str(data), "--json", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    manifest = json.loads((DEFAULT_MODEL_DIR / "manifest.json").read_text(encoding="utf-8"))
    assert result["model"] == manifest["name"] and result["questions"] == 2
    res = runner.invoke(main, ["inspect", "default", str(data), "--json", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["norms"]["question"]["count"] == 2
    res = runner.invoke(main, ["eval", "./default", str(data)])  # a directory that does not exist
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_calibrate_accepts_default_and_writes_a_calibrated_copy(tmp_path: Path) -> None:
    import filecmp

    rows = [
        {"id": "reset", "answer": "Use the reset link on the sign-in page.", "question": "how do I reset my password"},
        {"id": "refund", "answer": "Refunds are paid within 14 days.", "question": "can I get my money back"},
        {"id": "dark", "answer": "Dark mode is under Settings, Appearance.", "question": "is there a dark theme"},
    ]
    data = _write(tmp_path / "dev.jsonl", rows)
    built_in = (DEFAULT_MODEL_DIR / "manifest.json").read_bytes()
    runner = CliRunner()
    res = runner.invoke(main, ["calibrate", "default", str(data)])
    assert (res.exit_code, res.stderr.splitlines()[-1]) == (
        2,
        "Error: default is the built-in model, which calibrate never changes: pass --out DIR to write a "
        "calibrated copy (then use --model DIR), or --dry-run to fit and report only",
    )
    res = runner.invoke(main, ["calibrate", "default", str(data), "--dry-run"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "models" / "calibrated"
    res = runner.invoke(main, ["calibrate", "default", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert (report["model"], report["written"]) == (str(out), True)
    assert (DEFAULT_MODEL_DIR / "manifest.json").read_bytes() == built_in  # the built-in model is untouched
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["calibration"] == report["calibration"] and manifest["calibration"]["data"] == "dev.jsonl"
    files = sorted(p.name for p in DEFAULT_MODEL_DIR.iterdir() if p.name != "manifest.json")
    assert filecmp.cmpfiles(DEFAULT_MODEL_DIR, out, files, shallow=False)[0] == files
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["calibrated"]  # no work folder left
    res = runner.invoke(main, ["calibrate", "default", str(data), "--out", str(out)])
    assert (res.exit_code, res.stderr) == (
        1,
        f"Error: --out {out}: already exists; choose a new directory for the calibrated copy\n",
    )
    unlabelled = _write(tmp_path / "answers.jsonl", [{"answer": r["answer"]} for r in rows])
    res = runner.invoke(main, ["calibrate", "default", str(unlabelled), "--out", str(tmp_path / "models" / "x")])
    assert res.exit_code == 1 and "no questions found" in res.stderr
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["calibrated"]  # a failure writes nothing


def test_help_says_where_the_built_in_model_lives() -> None:
    runner = CliRunner()
    for args in (["--help"], ["eval", "--help"], ["inspect", "--help"]):
        res = runner.invoke(main, args, terminal_width=400)
        assert res.exit_code == 0
        assert str(DEFAULT_MODEL_DIR) in " ".join(res.stdout.split()), args


# -- -v on search --------------------------------------------------------------------------------------


def test_verbose_search_logs_load_encode_and_search_timings(faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    index = tmp_path / "ix"
    _build(faq_file, faq_model, index)
    res = CliRunner().invoke(main, ["-v", "search", "how do I reset my password", "--index", str(index), "-k", "2"])
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert re.fullmatch(
        rf"qaindex: loaded {re.escape(str(index))} \(5 answers, model tiny-test-model\) in \d+\.\d ms", lines[0]
    )
    assert re.fullmatch(r"qaindex: encoded 1 question\(s\) in \d+\.\d\d ms", lines[1])
    assert re.fullmatch(r"qaindex: searched 1 question\(s\), k=2, in \d+\.\d\d ms", lines[2])
    quiet = CliRunner().invoke(main, ["search", "how do I reset my password", "--index", str(index)])
    assert quiet.stderr == ""


# -- ids are never cut ---------------------------------------------------------------------------------


def test_text_output_shows_whole_ids(faq_model: Path, tmp_path: Path) -> None:
    long_id = "security-too-many-login-attempts-after-a-password-reset"
    rows = [dict(r) for r in FAQ]
    rows[0]["id"] = long_id
    corpus = _write(tmp_path / "c.jsonl", rows)
    index = tmp_path / "ix"
    _build(corpus, faq_model, index)
    res = CliRunner().invoke(main, ["search", "how do I reset my password", "--index", str(index)])
    assert res.exit_code == 0, res.output
    ids = [line.split()[2] for line in res.stdout.splitlines()[1:]]  # rank, score, id
    assert long_id in ids and set(ids) == {long_id, "refund", "export", "7", "5"}
    removed = CliRunner().invoke(main, ["remove", long_id, "--index", str(index)])  # it pastes
    assert removed.exit_code == 0 and removed.stdout == f"removed 1 answer; 4 left in {index}\n"


# -- id-less answers added to an index ------------------------------------------------------------------


def test_id_less_answers_of_two_files_never_collide(faq_model: Path, tmp_path: Path) -> None:
    first = _write(tmp_path / "a.jsonl", [{"answer": "Open settings to reset."}, {"answer": "Refunds in 14 days."}])
    more = _write(tmp_path / "b.jsonl", [{"answer": "Export from the file menu."}, {"answer": "Sync every minute."}])
    index = tmp_path / "ix"
    _build(first, faq_model, index)
    res = CliRunner().invoke(main, ["add", str(more), "--index", str(index)])
    assert res.exit_code == 0, res.output
    ranker = Ranker.load(index)
    assert ranker.get(3).answer == "Export from the file menu." and ranker.get(4).answer == "Sync every minute."
    assert ranker.get(1).answer == "Open settings to reset."
    ranker.add([{"answer": "Two-factor login uses an app."}, {"id": "x", "answer": "Named."}])
    assert ranker.get(5).answer == "Two-factor login uses an app." and ranker.get("x").answer == "Named."


def test_id_less_answers_continue_after_the_largest_integer_id(faq_model: Path) -> None:
    ranker = Ranker.build([{"id": 40, "answer": "forty"}, {"id": "12", "answer": "twelve"}, {"id": "a-99", "answer": "x"}],
                          model=faq_model, device="cpu")  # fmt: skip
    ranker.add([{"answer": "next"}])
    assert ranker.get(41).answer == "next"


def test_an_explicit_id_taken_by_a_default_one_is_a_duplicate(faq_model: Path, tmp_path: Path) -> None:
    ranker = Ranker.build([{"answer": "one"}, {"answer": "two"}], model=faq_model, device="cpu")
    more = _write(tmp_path / "m.jsonl", [{"answer": "three"}, {"id": 3, "answer": "also three"}])
    with pytest.raises(
        CorpusError,
        match=rf"^{re.escape(str(more))}:2: duplicate id 3 \(first seen at {re.escape(str(more))}:1\); ids must be unique$",
    ):
        ranker.add(more)


# -- build over an index ---------------------------------------------------------------------------------


def test_build_refuses_to_replace_an_index_without_force(faq_file: Path, faq_model: Path, tmp_path: Path) -> None:
    index = tmp_path / "ix"
    _build(faq_file, faq_model, index)
    before = (index / "manifest.json").read_bytes()
    other = _write(tmp_path / "other.jsonl", [{"answer": "Only this one."}])
    res = CliRunner().invoke(main, ["build", str(other), "--model", str(faq_model), "--index", str(index)])
    assert res.exit_code == 1
    assert res.stderr == (
        f"Error: {index} already holds an index of 5 answers; pass --force to replace it, "
        "or add answers to it with `qaindex add`\n"
    )
    assert (index / "manifest.json").read_bytes() == before
    assert _build(other, faq_model, index, "--force").startswith(f"indexed 1 answer into {index}")
    assert len(Ranker.load(index)) == 1


# -- progress bar of a file build --------------------------------------------------------------------------


def test_count_lines(tmp_path: Path) -> None:
    from qaindex.indexing.streaming import count_lines

    path = tmp_path / "c.jsonl"
    for content, expected in [(b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"a\n\nb\n", 3), (b"x\n" * 100_000, 100_000)]:
        path.write_bytes(content)
        assert count_lines(path, block=7) == expected == count_lines(path)


def test_file_build_progress_bar_has_a_total(faq_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tqdm

    bars: list[tqdm.tqdm] = []

    class Recorder(tqdm.tqdm):  # type: ignore[misc, type-arg]
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)
            self.initial_total = self.total
            bars.append(self)

    monkeypatch.setattr(tqdm, "tqdm", Recorder)
    rows = [{"answer": f"answer number {i}"} for i in range(50)]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n\n", encoding="utf-8")  # 2 blank lines
    Ranker.build(corpus, model=faq_model, device="cpu", progress=True, batch_size=8)
    (bar,) = bars
    assert bar.initial_total == 52  # lines, counted before encoding
    assert bar.n == bar.total == 50  # ends at 100%


# -- messages ------------------------------------------------------------------------------------------------


def test_invalid_json_message_has_no_doubled_word(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": "ok"}\n{"answer": "unterminated\n', encoding="utf-8")
    with pytest.raises(CorpusError) as info:
        qaindex.read_corpus(bad)
    assert str(info.value) == (
        f"{bad}:2: not valid JSON (Unterminated string starting at column 12); each line must be one JSON object"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('epochs = "three"\n', "setting 'epochs' must be an integer, got \"three\" (a string)"),
        ("lr = true\n", "setting 'lr' must be a number, got true (a boolean)"),
        ("batch-size = 2.5\n", "setting 'batch-size' must be an integer, got 2.5 (a number)"),
        ('ball = ["clip"]\n', "setting 'ball' must be a string, got a list"),
        ("riemannian = 1\n", "setting 'riemannian' must be true or false, got 1 (an integer)"),
    ],
)
def test_config_file_type_errors_name_the_setting_and_type(tmp_path: Path, text: str, message: str) -> None:
    from qaindex_export.config import read_config_file

    config = tmp_path / "t.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(qaindex.QAIndexError) as info:
        read_config_file(config)
    assert str(info.value) == f"{config}: {message}"


def test_config_file_accepts_well_typed_settings(tmp_path: Path) -> None:
    from qaindex_export.config import TrainConfig, read_config_file

    config = tmp_path / "t.toml"
    config.write_text('epochs = 3\nlr = 1\nball = "clip"\nriemannian = true\nalpha = 0.5\n', encoding="utf-8")
    values = read_config_file(config)
    assert TrainConfig(**values).validate().lr == 1


def test_train_on_answers_without_questions_points_at_the_teacher(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from qaindex.cli.train import train

    answers = _write(tmp_path / "answers.jsonl", [{"answer": "Open settings."}, {"answer": "Refunds in 14 days."}])
    out = tmp_path / "m"
    res = CliRunner().invoke(train, [str(answers), "--out", str(out)])
    assert res.exit_code == 1
    assert res.stderr == (
        f"Error: {answers}: no questions found, so there are no labels to train on; train without labels against "
        f"the MiniLM teacher: qaindex train {answers} --teacher minilm --out {out} "
        '(or give the answers "question"/"questions" fields)\n'
    )
    assert not out.exists()


@pytest.mark.torch
def test_train_summary_has_dev_onnx_for_a_held_out_dev_split(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from qaindex_export.training.synthetic import planted_word_groups, write_benchmark

    from qaindex.cli.train import train

    train_file = write_benchmark(planted_word_groups(80, seed=1), tmp_path / "train.jsonl")
    args = [str(train_file), "--out", str(tmp_path / "m"), "--embeddings", "none", "--epochs", "2", "--dim", "8"]
    args += ["--batch-size", "32", "--negatives", "3", "--ball", "radius", "--device", "cpu", "--quiet"]
    res = CliRunner().invoke(train, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["dev"]["questions"] == 8  # 10% of the 80 training questions, held out
    assert set(summary["dev_onnx"]) == {"map", "mrr"}
    assert summary["dev_onnx"]["map"] == pytest.approx(summary["dev"]["map"], abs=1e-4)


# -- the tests themselves never depend on the folder they are started from ----------------------------


def test_tests_run_in_an_empty_folder_of_their_own() -> None:
    assert Path.cwd() != ROOT and list(Path.cwd().iterdir()) == []


def test_a_quickstart_index_in_the_starting_folder_changes_no_test_result(
    faq_file: Path, faq_model: Path, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    start = tmp_path / "clone"
    start.mkdir()
    _build(faq_file, faq_model, start / "qaindex-index")  # what the README's quickstart leaves behind
    tests = [
        "tests/indexing/test_distributed.py::test_ray_missing_says_which_extra",
        "tests/cli/test_cli.py",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "QAINDEX_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            *(str(ROOT / t) for t in tests),
        ],
        cwd=start,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert sorted(p.name for p in start.iterdir()) == ["qaindex-index"]  # and no test wrote beside it
