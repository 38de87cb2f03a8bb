"""tools/question_sources.py (real user questions) on tiny synthetic stand-ins of its files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tools.question_sources import (
    PAIR_FILES,
    QUESTION_REPOS,
    html_text,
    jsonl_records,
    pair_file_records,
    posts_records,
    question_records,
)
from tools.training_corpus import SOURCES, assemble

POSTS = """<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1" PostTypeId="1" AcceptedAnswerId="3" Score="5" Title="How do I keep roasted beans fresh?"
       Body="&lt;p&gt;I buy a kilo at a time and it goes stale within a week or two.&lt;/p&gt;" />
  <row Id="2" PostTypeId="2" ParentId="1" Score="9"
       Body="&lt;p&gt;A higher-scored answer that was not accepted by the asker of the question.&lt;/p&gt;" />
  <row Id="3" PostTypeId="2" ParentId="1" Score="2"
       Body="&lt;p&gt;Keep them in an opaque, airtight jar away from heat.&lt;/p&gt;&lt;pre&gt;&lt;code&gt;jar.seal()&lt;/code&gt;&lt;/pre&gt;" />
  <row Id="4" PostTypeId="1" Score="1" Title="Is a burr grinder worth it?" Body="&lt;p&gt;short&lt;/p&gt;" />
  <row Id="5" PostTypeId="2" ParentId="4" Score="0" Body="&lt;p&gt;An answer nobody voted for, long enough to be kept.&lt;/p&gt;" />
  <row Id="6" PostTypeId="2" ParentId="4" Score="4" Body="&lt;p&gt;Yes: burrs give an even grind, so the extraction is even too.&lt;/p&gt;" />
  <row Id="7" PostTypeId="1" Score="0" Title="Why is my espresso sour?" Body="" />
  <row Id="8" PostTypeId="5" Body="&lt;p&gt;A tag wiki excerpt, which is not a question at all.&lt;/p&gt;" />
</posts>
"""
SKEPTICS = (
    json.dumps(
        {
            "question": "Does sugar make children hyperactive?",
            "answer": "Double-blind trials found no "
            "effect of sugar on children's behaviour, even in children said to be sensitive to it.",
        }
    )
    + "\n"
    + json.dumps(
        {
            "question": "Does sugar make children hyperactive?",
            "answer": "A second answer to the same question, which is not kept.",
        }
    )
    + "\n"
    + json.dumps({"question": "Do we use only 10% of our brains?", "answer": "No."})
    + "\n"
)


def test_posts_pair_titles_with_the_accepted_or_best_answer() -> None:
    records = list(posts_records(POSTS))
    assert records == [
        ("How do I keep roasted beans fresh?", "Keep them in an opaque, airtight jar away from heat."),
        ("I buy a kilo at a time and it goes stale within a week or two.", None),
        # no accepted answer: the highest-scored one; a body under 40 characters is not kept
        ("Is a burr grinder worth it?", "Yes: burrs give an even grind, so the extraction is even too."),
        # no answer with a positive score: the title alone
        ("Why is my espresso sour?", None),
    ]


def test_html_text_drops_code_blocks_and_markup() -> None:
    body = (
        "<p>Run <code>make</code> first.</p><pre><code>make all\nmake install</code></pre><ul><li>then test</li></ul>"
    )
    assert html_text(body) == "Run make first. then test"


def test_jsonl_keeps_the_first_answer_and_drops_short_ones() -> None:
    assert [(q, a is not None) for q, a in jsonl_records(SKEPTICS)] == [
        ("Does sugar make children hyperactive?", True),
        ("Do we use only 10% of our brains?", False),
    ]


def test_question_records_read_one_file_of_a_bare_repository(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "Posts.xml").write_text(POSTS)
    (work / "Posts.xml").write_text(POSTS.replace("beans", "tea leaves"))
    (work / "answers.jsonl").write_text(SKEPTICS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "data"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "bare.git")], check=True)

    assert list(question_records(tmp_path / "bare.git", "data/Posts.xml")) == list(posts_records(POSTS))
    assert list(question_records(tmp_path / "bare.git", "answers.jsonl")) == list(jsonl_records(SKEPTICS))
    # a corpus of these sources alone, with an evaluation text excluded
    feeds = [("se-coffee", question_records(tmp_path / "bare.git", "data/Posts.xml"))]
    counts = assemble(tmp_path / "corpus", feeds, exclude={"why is my espresso sour?"})
    texts = [json.loads(line)["text"] for line in (tmp_path / "corpus" / "texts.jsonl").read_text().splitlines()]
    pairs = np.load(tmp_path / "corpus" / "pairs.npy")
    assert counts["pairs_se-coffee"] == 2 and counts["eval_overlap_dropped"] == 1
    assert {(texts[q], texts[a]) for q, a in pairs} == {
        ("How do I keep roasted beans fresh?", "Keep them in an opaque, airtight jar away from heat."),
        ("Is a burr grinder worth it?", "Yes: burrs give an even grind, so the extraction is even too."),
    }


def test_every_question_source_is_listed_with_a_share_alike_licence_and_never_the_evaluation_site() -> None:
    for key, (repo, _, what, licence, stated) in QUESTION_REPOS.items():
        assert licence in ("CC BY-SA 3.0", "CC BY-SA 4.0") and stated, key
        assert SOURCES[key][1] == licence and repo in SOURCES[key][0]
        assert "web application" not in what.lower() and "webapps" not in key


SQUAD = [
    {
        "question": "When did the Sichuan earthquake occur?",
        "answer": "A whole paragraph. The 2008 Sichuan earthquake occurred on May 12 in Sichuan province. More text.",
        "sentence": "The 2008 Sichuan earthquake occurred on May 12 in Sichuan province.",
    },
    {
        "question": "What is a flagged question?",
        "answer": "A record the extraction found in an evaluation corpus, which must never be trained on.",
        "sentence": "A record the extraction found in an evaluation corpus, which must never be trained on.",
        "eval_overlap": ["wikiqa:answer"],
    },
]


def test_pair_files_read_the_named_answer_field_and_skip_flagged_records(tmp_path: Path) -> None:
    path = tmp_path / "squad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SQUAD))
    assert list(pair_file_records(path, PAIR_FILES["squad11"][3])) == [
        ("When did the Sichuan earthquake occur?", SQUAD[0]["sentence"])
    ]
    assert list(pair_file_records(path)) == [("When did the Sichuan earthquake occur?", SQUAD[0]["answer"])]
    # a corpus extended by the file: its source key is recorded, a question the first corpus pairs keeps its answer
    assemble(tmp_path / "first", [("squad11", pair_file_records(path, "sentence"))])
    counts = assemble(
        tmp_path / "both",
        [("squad11", pair_file_records(path, "sentence")), ("squad11-paragraph", pair_file_records(path))],
        extend=tmp_path / "first",
    )
    records = [json.loads(line) for line in (tmp_path / "both" / "texts.jsonl").read_text().splitlines()]
    pairs = np.load(tmp_path / "both" / "pairs.npy")
    assert counts["pairs"] == len(pairs) == 1 and not any(k.startswith("pairs_squad11") for k in counts)
    assert [r["source"] for r in records] == ["squad11", "squad11"]  # the paragraph is not added
    assert all(SOURCES[key][1].startswith("CC BY-SA") for key in PAIR_FILES)


def test_squad_pages_give_each_question_its_paragraph_and_answer_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import pair_files

    page = (
        '<h1 id="title">Sichuan</h1><div class="para-wrap"><pre>It shook. The quake hit on May 12 in '
        "Sichuan. Many fled.</pre>"
        '<div class="qa-wrap"><p> <strong class="question">When did it hit?</strong></p><ol>'
        '<li><span class="answer">May 12</span></li></ol></div></div>'
    )
    listing = "Sichuan.html\0index.html\0"
    monkeypatch.setattr(pair_files, "_git", lambda git_dir, *args: listing if args[0] == "ls-tree" else page)
    rows = list(pair_files.squad_pairs(Path("repo"), "dev"))
    assert [(r["question"], r["sentence"], r["title"], r["source"]) for r in rows] == [
        ("When did it hit?", "The quake hit on May 12 in Sichuan.", "Sichuan", "squad1.1-dev")
    ]
    assert rows[0]["answer"] == "It shook. The quake hit on May 12 in Sichuan. Many fled."
    assert pair_files.answer_sentence("No answer here.", "May 12") is None
