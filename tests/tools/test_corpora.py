"""The evaluation-corpus builder (tools/corpora.py) and the metric code of the user-corpora
benchmark (benchmarks/quality/pooled.py --corpora) on tiny data (no torch, no network)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from helpers.onnx_models import point_model

from benchmarks.quality import pooled, pooled_eval
from qaindex.model import Model
from tools import corpora

ROOT = Path(__file__).resolve().parents[2]

STACKFAQ_XML = """<root>
<qapair>
<rephr>
How do I cross out text?
</rephr>
<rephr>
*
</rephr>
<rephr>
strike &lt;s&gt; on github
</rephr>
<question>Strikethrough with GitHub Markdown</question>
<answer>   Use ~~tildes~~.   </answer>
<answer>Use &lt;del&gt; tags.</answer>
</qapair>
<qapair>
<rephr>delete my fb account</rephr>
<question>How do I delete my Facebook account?</question>
<answer>Use ~~tildes~~.</answer>
<answer>Go to Settings, then Deactivate.</answer>
</qapair>
<qapair>
<rephr>a thread without answers</rephr>
<question>Nothing</question>
</qapair>
</root>"""

SEMEVAL_XML = """<root>
<Question QID="Q1"><QSubject>courier to Europe?</QSubject><QBody>Courier to Europe? Which company is cheap?</QBody>
 <Comment CID="Q1_C1" CGOLD="Good"><CSubject>RE</CSubject><CBody>try ARAMEX</CBody></Comment>
 <Comment CID="Q1_C2" CGOLD="Bad"><CSubject>RE</CSubject><CBody>lol</CBody></Comment>
 <Comment CID="Q1_C3" CGOLD="Good"><CSubject>RE</CSubject><CBody>  </CBody></Comment>
</Question>
<Question QID="Q2"><QSubject>Visa</QSubject><QBody>how long does a family visa take</QBody>
 <Comment CID="Q2_C1" CGOLD="Potential"><CSubject>RE</CSubject><CBody>lol</CBody></Comment>
 <Comment CID="Q2_C2" CGOLD="Good"><CSubject>RE</CSubject><CBody>about two weeks &amp; a bit</CBody></Comment>
</Question>
<Question QID="Q3"><QSubject>no good</QSubject><QBody>nobody helps</QBody>
 <Comment CID="Q3_C1" CGOLD="Dialogue"><CSubject>RE</CSubject><CBody>thanks all</CBody></Comment>
</Question>
</root>"""


# ------------------------------------------------------------------------ builder


def test_stackfaq_rephrasings_answer_with_their_thread() -> None:
    c = corpora.stackfaq_from_xml(STACKFAQ_XML)
    # whitespace collapsed, entities decoded; the second thread's copy of "Use ~~tildes~~." is one record
    assert c.answers == [
        ("sf0-0", "Use ~~tildes~~."),
        ("sf0-1", "Use <del> tags."),
        ("sf1-1", "Go to Settings, then Deactivate."),
    ]
    # "*" (annotator separator) and the original title are not questions; an answerless thread has none
    assert c.questions == [
        ("How do I cross out text?", ["sf0-0", "sf0-1"]),
        ("strike <s> on github", ["sf0-0", "sf0-1"]),
        ("delete my fb account", ["sf0-0", "sf1-1"]),
    ]
    c.validate()


def test_semeval_good_comments_are_relevant_and_every_comment_is_in_the_pool() -> None:
    c = corpora.semeval_from_xml([SEMEVAL_XML])
    assert c.answers == [
        ("Q1_C1", "try ARAMEX"),
        ("Q1_C2", "lol"),
        ("Q2_C2", "about two weeks & a bit"),
        ("Q3_C1", "thanks all"),
    ]
    # a body that repeats the subject is the question alone; otherwise subject + body; no Good -> no question
    assert c.questions == [
        ("Courier to Europe? Which company is cheap?", ["Q1_C1"]),
        ("Visa how long does a family visa take", ["Q2_C2"]),
    ]


def test_markdown_passages_split_at_headings_and_cut_long_sections() -> None:
    page = (
        '# Quotas<a name="limits"></a>\n\nForecast has these quotas\\. See [the table](#t) here.\n\n'
        "## Service quotas\n" + "\n".join(f"| Maximum number of things number {i} | {i * 10} |" for i in range(40))
    )
    out = corpora.markdown_passages(page, max_chars=300)
    assert out[0] == "Quotas\nForecast has these quotas. See the table here."
    rest = out[1:]
    assert len(rest) > 1 and all(p.startswith("Service quotas\n") for p in rest)
    assert all(len(p) <= 300 + len("Service quotas\n") for p in rest)
    # every table row lands in exactly one passage
    rows = [line for p in rest for line in p.splitlines()[1:]]
    assert len(rows) == 40 and len(set(rows)) == 40
    assert corpora.markdown_passages("# T\n\nshort") == []  # under MIN_PASSAGE_CHARS


def test_answer_passages_word_bounded_then_coverage() -> None:
    passages = ["limit is 100 rows", "limit is 10 rows", "columns: 10 per item", "nothing here at all"]
    assert corpora.answer_passages("10", passages) == [1, 2]  # "10" never matches inside "100"
    assert corpora.answer_passages("Limit IS 10", passages) == [1]
    # not verbatim: the passages covering most of its words (>= 0.6)
    assert corpora.answer_passages("rows limit 10 hard", passages) == [1]
    assert corpora.answer_passages("completely unrelated words", passages) == []
    assert corpora.answer_passages("...", passages) == []


def test_cap_questions_is_a_seeded_sample_in_source_order() -> None:
    qs = [(f"q{i}", ["a"]) for i in range(50)]
    a = corpora.cap_questions(qs, limit=10, seed=3)
    assert a == corpora.cap_questions(qs, limit=10, seed=3) and len(a) == 10
    assert a == sorted(a, key=lambda q: int(q[0][1:]))
    assert a != corpora.cap_questions(qs, limit=10, seed=4)
    assert corpora.cap_questions(qs[:5], limit=10) == qs[:5]


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    c = corpora.Corpus("tiny", [("a1", "first answer"), ("a2", "second")], [("q?", ["a2", "a1"])], {"x": 1})
    folder = corpora.write_corpus(c, tmp_path)
    lines = (folder / "answers.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [{"id": "a1", "answer": "first answer"}, {"id": "a2", "answer": "second"}]
    assert json.loads((folder / "questions.jsonl").read_text()) == {"question": "q?", "answers": ["a2", "a1"]}
    meta = json.loads((folder / "meta.json").read_text())
    assert meta == {"x": 1, "answers": 2, "questions": 1, "relevant_per_question": 2.0}
    assert sorted(p.name for p in folder.iterdir()) == ["answers.jsonl", "meta.json", "questions.jsonl"]
    back = corpora.read_corpus_dir(folder)
    assert (back.answers, back.questions) == (c.answers, c.questions)


@pytest.mark.parametrize(
    ("answers", "questions", "message"),
    [
        ([("a", "x"), ("a", "y")], [("q", ["a"])], "tiny: answer id 'a' appears twice"),
        ([("a", " ")], [("q", ["a"])], "tiny: answer 'a' is empty"),
        ([("a", "x")], [("q", [])], "tiny: question 'q' has no relevant answer"),
        ([("a", "x")], [("q", ["b"])], "tiny: question 'q' names unknown answer id 'b'"),
    ],
)
def test_validate_names_the_problem(
    answers: list[tuple[str, str]], questions: list[tuple[str, list[str]]], message: str, tmp_path: Path
) -> None:
    with pytest.raises(corpora.CorpusBuildError) as err:
        corpora.write_corpus(corpora.Corpus("tiny", answers, questions), tmp_path)
    assert str(err.value) == message
    assert not (tmp_path / "tiny" / "answers.jsonl").exists()  # nothing half-written


def test_read_corpus_dir_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "answers.jsonl").write_text('{"id": "a", "answer": "x"}\n{"id": "b"}\n')
    (tmp_path / "questions.jsonl").write_text("")
    with pytest.raises(corpora.CorpusBuildError, match=r"answers\.jsonl:2: bad record"):
        corpora.read_corpus_dir(tmp_path)


def test_build_aws_on_a_tiny_documentation_tree(tmp_path: Path) -> None:
    src = tmp_path / "aws-documentation"
    docs = src / "documents" / "guide-a" / "doc_source"
    docs.mkdir(parents=True)
    (docs / "limits.md").write_text(
        "# Limits\n\nThe maximum number of rows in a dataset is 1 billion rows in total.\n\n"
        "## Columns\n\nThe maximum number of columns in an item metadata dataset is 10 columns.\n"
    )
    for i in range(5):
        (docs / f"other{i}.md").write_text(
            f"# Other {i}\n\nAn unrelated page number {i} about something else entirely.\n"
        )
    (src / "QA_true.csv").write_text(
        "\ufeffQuestion,Answer_True,Yes_No_True,Document_True\n"
        "How many rows max?,1 billion,None, guide-a/limits.md\n"
        "Max columns in item metadata?,10 columns,None,guide-a/limits.md\n"
        "Something absent?,purple elephants,None,guide-a/limits.md\n"
    )
    c = corpora.build_aws(tmp_path, pool=4)
    ids = [a for a, _ in c.answers]
    assert ids[:2] == ["guide-a/doc_source/limits.md#0", "guide-a/doc_source/limits.md#1"]
    assert len(ids) == 4  # the referenced page whole, then other pages of the guide up to the pool size
    assert c.questions == [
        ("How many rows max?", ["guide-a/doc_source/limits.md#0"]),
        ("Max columns in item metadata?", ["guide-a/doc_source/limits.md#1"]),
    ]
    assert c.meta["dropped_questions"] == ["Something absent?"]


def test_main_reports_a_missing_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert corpora.main(["--sources", str(tmp_path), "--data", str(tmp_path / "out"), "--only", "stackfaq"]) == 1
    err = capsys.readouterr().err
    assert "stackExchange-FAQ.xml: not found; clone https://github.com/ML-Recipes/BERT-FAQ" in err


def test_product_faq_in_the_repository_is_well_formed(tmp_path: Path) -> None:
    c = corpora.build_product_faq()
    c.validate()
    assert 150 <= len(c.answers) <= 200 and len(c.questions) >= 40
    assert c.meta["source"]["licence"] == "Apache-2.0"
    # every answer id is referenced by no more than a few questions: a varied question set
    counts: dict[str, int] = {}
    for _, rel in c.questions:
        for a in rel:
            counts[a] = counts.get(a, 0) + 1
    assert max(counts.values()) <= 3 and len(counts) >= 40
    assert corpora.main(["--sources", str(tmp_path), "--data", str(tmp_path), "--only", "product-faq"]) == 0
    assert corpora.read_corpus_dir(tmp_path / "product-faq").answers == c.answers


# ------------------------------------------------------------------------ benchmark metric code


def test_isotropy_equals_brute_force() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(30, 5)) + 0.7
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    pairs = [float(unit[i] @ unit[j]) for i, j in itertools.permutations(range(30), 2)]
    got = pooled.isotropy(v)
    assert got["mean_pairwise_cosine"] == pytest.approx(np.mean(pairs), abs=1e-12)
    assert got["norm_mean"] == pytest.approx(np.linalg.norm(v, axis=1).mean())
    assert got["norm_std"] == pytest.approx(np.linalg.norm(v, axis=1).std())
    # a cone (all coordinates positive) is far from isotropic; centred Gaussian vectors are not
    assert got["mean_pairwise_cosine"] > 0.3
    assert abs(pooled.isotropy(rng.normal(size=(2000, 64)))["mean_pairwise_cosine"]) < 0.01


def test_corpus_groups_pool_every_answer_in_corpus_order() -> None:
    answers = [("a", "alpha"), ("b", "beta"), ("c", "gamma")]
    groups = pooled.corpus_groups(answers, [("q1", ["c"]), ("q2", ["a", "b"])])
    assert pooled_eval.real_answers(groups) == ["alpha", "beta", "gamma"]
    assert pooled_eval.pool_answers(groups)[3:] == pooled_eval.JUNK_ANSWERS
    questions, relevant = pooled_eval.questions_and_relevant(groups)
    assert questions == ["q1", "q2"] and [r.tolist() for r in relevant] == [[2], [0, 1]]
    with pytest.raises(ValueError, match="names unknown answer id 'z'"):
        pooled.corpus_groups(answers, [("q", ["z"])])


def test_corpus_eval_through_the_ranker_equals_brute_force(tmp_path: Path) -> None:
    """Whole-corpus MRR@10 / recall@10 / P@1 of a corpus through the real Ranker against an
    independent exact computation (cosine geometry, point model)."""
    rng = np.random.default_rng(1)
    n_answers, n_questions = 150, 40
    points = rng.normal(size=(n_answers + n_questions, 8))
    questions = []
    for qi in range(n_questions):
        rel = sorted(int(x) for x in rng.choice(n_answers, size=int(rng.integers(1, 4)), replace=False))
        points[n_answers + qi] = points[rel[0]] + rng.normal(scale=0.8, size=8)
        questions.append((f"p{n_answers + qi}", [f"a{r}" for r in rel]))
    directory, words = point_model(tmp_path / "m", points.astype(np.float32), geometry="cosine")
    answers = [(f"a{i}", words[i]) for i in range(n_answers)]
    got = pooled_eval.eval_qaindex_model(Model.load(directory), pooled.corpus_groups(answers, questions, junk=False))
    a = points[:n_answers] / np.linalg.norm(points[:n_answers], axis=1, keepdims=True)
    rr, recall, p1 = [], [], []
    for text, rel_ids in questions:
        q = points[int(text[1:])]
        top = list(np.argsort(-(a @ q), kind="stable")[:10])
        good = {int(r[1:]) for r in rel_ids}
        hits = [i for i, r in enumerate(top) if r in good]
        rr.append(1 / (hits[0] + 1) if hits else 0.0)
        recall.append(len(hits) / len(good))
        p1.append(float(top[0] in good))
    assert got["questions"] == n_questions and got["answers"] == n_answers and got["skipped"] == 0
    assert got["mrr@10"] == pytest.approx(np.mean(rr), abs=1e-12)
    assert got["recall@10"] == pytest.approx(np.mean(recall), abs=1e-12)
    assert got["p@1"] == pytest.approx(np.mean(p1), abs=1e-12)
    assert 0.0 < got["mrr@10"] < 1.0


def test_bm25_stemmer_matches_inflected_forms() -> None:
    answers = [("a", "She runs every morning in new shoes."), ("b", "A recipe for cakes."), ("c", "Stock prices.")]
    pools = {"t": pooled.corpus_groups(answers, [("running shoe", ["a"])], junk=False)}
    assert pooled_eval.eval_bm25(pools, stem=True)["t"]["p@1"] == 1.0
    # without the stemmer neither "running" nor "shoe" is an indexed word: no hit at all
    assert pooled_eval.eval_bm25(pools, stem=False)["t"]["mrr@10"] == 0.0


def test_ratios_and_cache(tmp_path: Path) -> None:
    results = {
        "model": {"c": {"mrr@10": 0.3}},
        pooled.BM25_STEMMED: {"c": {"mrr@10": 0.6}},
        pooled.MINILM: {"c": {"mrr@10": 0.75}},
    }
    pooled.with_ratios(results)
    assert results["model"]["c"]["x_bm25"] == pytest.approx(0.5)
    assert results["model"]["c"]["x_minilm"] == pytest.approx(0.4)
    assert results[pooled.MINILM]["c"]["x_minilm"] == pytest.approx(1.0)
    calls: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.arange(len(texts) * 2, dtype=np.float32).reshape(len(texts), 2)

    cached = pooled.cached_encoder(encode, "t", cache=tmp_path)
    first = cached(["x", "y"])
    assert np.array_equal(cached(["x", "y"]), first) and len(calls) == 1
    cached(["x", "z"])
    assert len(calls) == 2 and len(list(tmp_path.glob("t-2-*.npy"))) == 2


def test_question_speed_and_its_table(tmp_path: Path) -> None:
    points = np.random.default_rng(2).normal(size=(6, 8)).astype(np.float32)
    directory, words = point_model(tmp_path / "m", points, geometry="cosine")
    speed = pooled.question_speed(directory, words * 2)
    assert speed["questions"] == 12 and 0 < speed["median_ms"] < 1e4 and speed["mean_ms"] > 0
    metrics = {"mrr@10": 0.5, "recall@10": 0.75, "p@1": 0.25, "junk@10": 0.0}
    out = {
        "corpora": {"c": {"answers": 6, "questions": 3, "source": {}}},
        "results": {"m": {"c": dict(metrics)}, pooled.MINILM: {"c": {**metrics, "mean_pairwise_cosine": 0.1,
                                                                       "norm_mean": 1.0, "norm_std": 0.0}}},
        "question_encode_ms": {"m": {"median_ms": 1.234, "mean_ms": 2.5, "questions": 12}},
    }  # fmt: skip
    text = pooled.corpora_markdown(out)
    assert "### Encoding one question (ms; 12 questions, the first 20 of each corpus" in text
    assert "| m | 1.23 | 2.50 |" in text
    assert "| m | - |" in text and f"| {pooled.MINILM} | 0.10 / 1.000 ± 0.000 |" in text  # no isotropy measured
    assert "Encoding one question" not in pooled.corpora_markdown({**out, "question_encode_ms": {}})
