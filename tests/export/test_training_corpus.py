"""tools/training_corpus.py on tiny stand-ins of its three sources."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tools.training_corpus import (
    DOC_REPOS,
    SOURCES,
    assemble,
    build,
    doc_file_records,
    docs_records,
    eval_texts,
    faq_yaml_records,
    markdown_records,
    normalize,
    strip_markdown,
    user_question,
)

WORDNET_LINE = (
    "00001740 29 v 04 breathe 0 take_a_breath 0 respire 0 suspire 3 000 | draw air into, and expel out of, "
    'the lungs; "I can breathe better when the air is clean"; "The patient is respiring"  \n'
)
MEDQUAD = """<?xml version="1.0" encoding="UTF-8"?>
<Document id="1"><QAPairs>
<QAPair pid="1"><Question qid="1-1">What are the symptoms of Flu ?</Question>
<Answer>Fever, cough and aching muscles are the usual symptoms of flu.</Answer></QAPair>
<QAPair pid="2"><Question qid="1-2">How to prevent Flu ?</Question><Answer></Answer></QAPair>
</QAPairs></Document>
"""
FAQ_PAGE = """<html><body><h2>General questions<a class="headerlink" href="#x">¶</a></h2>
<h3>Why is Python slow sometimes?<a class="headerlink" href="#y">¶</a></h3>
<p>Python is interpreted, so a loop in pure Python does more work per step than compiled code.</p>
<p>A second paragraph that is not part of the answer pair but long enough to be kept.</p>
</body></html>"""


def test_corpus_from_every_source(tmp_path: Path) -> None:
    wordnet = tmp_path / "wordnet"
    wordnet.mkdir()
    for pos in ("noun", "verb", "adj", "adv"):
        header = "  1 This software and database is being provided to you\n"
        (wordnet / f"data.{pos}").write_text(header + (WORDNET_LINE if pos == "verb" else ""), encoding="latin-1")
    medquad = tmp_path / "medquad" / "1_Test"
    medquad.mkdir(parents=True)
    (medquad / "0001.xml").write_text(MEDQUAD)
    pydoc = tmp_path / "html" / "faq"
    pydoc.mkdir(parents=True)
    (pydoc / "general.html").write_text(FAQ_PAGE)

    counts = build(tmp_path / "out", wordnet, tmp_path / "medquad", tmp_path / "html")
    records = [json.loads(line) for line in (tmp_path / "out" / "texts.jsonl").read_text().splitlines()]
    texts = [r["text"] for r in records]
    pairs = np.load(tmp_path / "out" / "pairs.npy")
    assert len(set(texts)) == len(texts) == counts["texts"]
    # WordNet: the gloss, both examples, one template question about a lemma, paired with the gloss
    assert "I can breathe better when the air is clean" in texts and "The patient is respiring" in texts
    gloss = next(t for t in texts if t.endswith("draw air into, and expel out of, the lungs"))
    questions = {texts[q] for q, a in pairs if texts[a] == gloss}
    assert len(questions) == 1
    question = questions.pop()
    assert any(w in question for w in ("breathe", "take a breath", "respire", "suspire")), question
    # MedQuAD: the answered question paired; the unanswered one kept alone
    i, j = (
        texts.index("What are the symptoms of Flu ?"),
        texts.index("Fever, cough and aching muscles are the usual symptoms of flu."),
    )
    assert [i, j] in pairs.tolist() and "How to prevent Flu ?" in texts
    # Python docs: the FAQ question paired with its first paragraph (header links dropped)
    q, a = (
        texts.index("Why is Python slow sometimes?"),
        texts.index("Python is interpreted, so a loop in pure Python does more work per step than compiled code."),
    )
    assert [q, a] in pairs.tolist()
    assert {r["source"] for r in records} == {"wordnet", "medquad", "pydoc"}
    assert counts["pairs"] == len(pairs) == 3


# ---------------------------------------------------------------- documentation repositories


FAQ_YML = """### YamlMime:FAQ
metadata:
  title: Container storage FAQ
title: Container storage FAQ
summary: Answers to common questions.
sections:
  - name: General
    questions:
      - question: What are the supported regions?
        answer: |
          Container storage is available in the **East US** and [West Europe](/azure/regions) regions.

          ```bash
          az storage list
          ```
      - question: Can I move a volume?
        answer: No.
      - question: Wie viel kostet es?
        answer: Das hängt von der Region ab, in der Sie den Speicher verwenden, und vom Tarif.
"""

MARKDOWN_FAQ = """---
title: Frequently asked questions about the sync client
description: Answers to questions about the sync client, such as how to pause syncing.
ms.date: 01/01/2024
---
# Frequently asked questions about the sync client

## How do I pause syncing?

Select the cloud icon, then select **Pause syncing** and choose how long.
See [Sync settings](sync.md) for more.

![screenshot](media/pause.png)

## Overview of settings

The settings page lists every option of the client and what it does.

## Configure the sync folder

### Choose a location

Pick a folder on a local NTFS drive; network drives are not supported for the sync folder.

## Why it matters

Keeping files in sync protects them against the loss of a single device.
"""

SUPPORT_ARTICLE = """---
title: Outlook freezes when you open a shared calendar
description: Fixes an issue in which Outlook stops responding when you open a shared calendar.
---
# Outlook freezes when you open a shared calendar

## Symptoms

When you open a calendar that another user shared with you, Outlook stops responding for several minutes.

## Resolution

Turn off Cached Exchange Mode for shared folders, and then restart Outlook so that the change takes effect.

## More information

This happens with very large calendars.
"""


def test_faq_yaml_pairs_questions_with_cleaned_answers() -> None:
    pairs = list(faq_yaml_records(FAQ_YML))
    # the code block, the markdown emphasis and the link target are gone; "No." is too short, German dropped
    assert pairs == [
        (
            "What are the supported regions?",
            "Container storage is available in the East US and West Europe regions.",
        )
    ]
    assert list(doc_file_records("articles/storage/faq.yml", FAQ_YML)) == pairs
    assert list(doc_file_records("articles/storage/toc.yml", "- name: Overview\n  href: overview.md\n")) == []


def test_markdown_faq_headings_and_title_description() -> None:
    pairs = dict(markdown_records(MARKDOWN_FAQ))
    assert (
        pairs["Frequently asked questions about the sync client"]
        == "Answers to questions about the sync client, such as how to pause syncing."
    )
    assert pairs["How do I pause syncing?"] == (
        "Select the cloud icon, then select Pause syncing and choose how long. See Sync settings for more."
    )
    # a task heading with only a sub-heading under it answers with the sub-section
    assert pairs["Configure the sync folder"].startswith("Pick a folder on a local NTFS drive")
    # a sub-heading that is neither question nor task, and a pronoun heading on a long title, give nothing
    assert "Overview of settings" not in pairs and "Choose a location" in pairs
    assert not any("matters" in q for q in pairs)
    assert len(pairs) == 4
    assert list(doc_file_records("docs/sync/faq.md", MARKDOWN_FAQ)) == list(markdown_records(MARKDOWN_FAQ))
    for skipped in ("docs/blog/2020/sync.md", "docs/includes/sync.md", "docs/README.md"):
        assert list(doc_file_records(skipped, MARKDOWN_FAQ)) == [], skipped


def test_support_article_pairs_title_and_symptoms_with_resolution() -> None:
    pairs = list(markdown_records(SUPPORT_ARTICLE))
    resolution = (
        "Turn off Cached Exchange Mode for shared folders, and then restart Outlook so that the change takes effect."
    )
    title = "Outlook freezes when you open a shared calendar"
    assert (title, resolution) in pairs
    assert (title, "Fixes an issue in which Outlook stops responding when you open a shared calendar.") in pairs
    symptom = (
        "When you open a calendar that another user shared with you, Outlook stops responding for several minutes."
    )
    assert (symptom, resolution) in pairs
    assert not any(q in ("Symptoms", "Resolution", "More information") for q, _ in pairs)


def test_user_question_keeps_questions_and_tasks_only() -> None:
    assert user_question("How do I reset my password?") == "How do I reset my password?"
    assert user_question("Step 2: Install the agent") == "Install the agent"
    assert user_question("Configuring `proxy` settings") == "Configuring proxy settings"
    assert user_question("How it helps", "Service Mesh") == "How Service Mesh helps"
    for heading in (
        "Next steps",
        "Prerequisites",
        "Parameters",
        "Version 1.2 - November 2020",
        "What's next?",
        "How it works",
        "Installieren Sie den Agenten",
        "Run",
    ):
        assert user_question(heading) is None, heading


def test_strip_markdown_drops_code_tables_and_markup() -> None:
    text = strip_markdown(
        "Use the **Get-Item** cmdlet ([docs](https://x.y/z)).\n\n| a | b |\n|---|---|\n\n"
        '```powershell\nGet-Item .\n```\n> [!NOTE]\n> Read <b>this</b> first.\n:::image type="content":::'
    )
    assert " ".join(text.split()) == "Use the Get-Item cmdlet (docs). Read this first."


def test_eval_overlap_is_dropped_and_extend_keeps_indices(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    old_texts = [("what is a cat?", "wordnet"), ("a small domesticated feline", "wordnet"), ("lone text", "pydoc")]
    (old / "texts.jsonl").write_text("".join(json.dumps({"text": t, "source": s}) + "\n" for t, s in old_texts))
    np.save(old / "pairs.npy", np.array([[0, 1]], dtype=np.int32))
    evaluation = tmp_path / "questions.jsonl"
    evaluation.write_text(json.dumps({"question": "How do I  PAUSE syncing?", "answers": ["a-1"]}) + "\n")
    exclude = eval_texts([evaluation])
    assert normalize("How do I pause   syncing?") in exclude

    records = [
        ("How do I pause syncing?", "Select the cloud icon and choose Pause."),  # eval question
        ("Where is the sync folder?", "It is under your user profile by default."),
        ("Where is the sync folder?", "It is under your user profile by default."),  # duplicate pair
        ("LONE TEXT", "An answer that reuses nothing."),  # equals an old text: reuses its index
    ]
    out = tmp_path / "new"
    counts = assemble(out, [("ms-support", records)], seed=3, extend=old, exclude=exclude)
    lines = [json.loads(line) for line in (out / "texts.jsonl").read_text().splitlines()]
    assert [(r["text"], r["source"]) for r in lines[:3]] == old_texts
    texts = [r["text"] for r in lines]
    pairs = np.load(out / "pairs.npy")
    assert pairs.dtype == np.int32 and pairs[0].tolist() == [0, 1]
    named = {(texts[q], texts[a]) for q, a in pairs[1:]}
    assert named == {
        ("Where is the sync folder?", "It is under your user profile by default."),
        ("lone text", "An answer that reuses nothing."),
    }
    assert len(pairs) == 3 and counts["pairs"] == 3 and counts["pairs_ms-support"] == 2
    # the evaluation question is dropped, and its answer with it
    assert "How do I pause syncing?" not in texts and "Select the cloud icon and choose Pause." not in texts
    assert counts["eval_overlap_dropped"] == 1 and counts["texts"] == len(texts) == 6
    assert counts["wordnet"] == 2 and counts["ms-support"] == 3


def test_every_doc_repository_is_a_permissive_source() -> None:
    permissive = ("CC-BY 4.0", "Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause")
    for key, (repo, _, _, licence, _) in DOC_REPOS.items():
        assert licence in permissive, key
        assert SOURCES[key][1] == licence and repo in SOURCES[key][0]


def test_pairs_of_a_text_shared_by_many_are_dropped(tmp_path: Path) -> None:
    boiler = "Describes an issue that occurs in the product and provides a resolution."
    records = [(f"Error {n} when you open the app", boiler) for n in range(4)]
    records += [("Install the agent", f"Download version {n} of the agent and run the installer.") for n in range(2)]
    counts = assemble(tmp_path / "out", [("ms-support", records)], max_shared=3)
    texts = [json.loads(line)["text"] for line in (tmp_path / "out" / "texts.jsonl").read_text().splitlines()]
    pairs = np.load(tmp_path / "out" / "pairs.npy")
    # four questions share the boilerplate answer: all four pairs go, the texts stay
    assert {texts[a] for _, a in pairs} == {
        f"Download version {n} of the agent and run the installer." for n in range(2)
    }
    assert boiler in texts and counts["pairs"] == 2 and counts["texts"] == 8


def test_reference_pages_and_restated_titles_give_no_title_pair() -> None:
    reference = (
        "---\ntitle: Range.Copy method (Excel)\ndescription: Copies the range to the specified range or to the "
        "Clipboard.\n---\n# Range.Copy method (Excel)\n\nCopies the range to the specified range.\n\n"
        "## How do I copy only the values?\n\nUse PasteSpecial with xlPasteValues after the copy, on the target.\n"
    )
    assert list(markdown_records(reference)) == [
        ("How do I copy only the values?", "Use PasteSpecial with xlPasteValues after the copy, on the target.")
    ]
    # a description that only restates the title falls back to the first paragraph; furniture is skipped
    restated = (
        "---\ntitle: Start a BizTalk application\ndescription: 'Learn more about: Start a BizTalk application'\n---\n"
        "# Start a BizTalk application\n\n_Applies To: BizTalk Server 2020_\n\n"
        "Open the Administration console, right-click the application and select Start.\n"
    )
    assert list(markdown_records(restated)) == [
        (
            "Start a BizTalk application",
            "Open the Administration console, right-click the application and select Start.",
        )
    ]
    assert user_question("IRP_MN_START_DEVICE") is None and user_question("Use ResampleMediaTask.SampleHeight") is None


def test_docs_records_read_a_bare_repository_under_its_folder(tmp_path: Path) -> None:
    import subprocess

    work = tmp_path / "work"
    (work / "docs" / "sync").mkdir(parents=True)
    (work / "docs" / "sync" / "faq.md").write_text(MARKDOWN_FAQ)
    (work / "docs" / "storage-faq.yml").write_text(FAQ_YML)
    (work / "site").mkdir()
    (work / "site" / "other.md").write_text(SUPPORT_ARTICLE)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "docs"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "bare.git")], check=True)

    pairs = list(docs_records(tmp_path / "bare.git", "docs/"))
    # files in path order under docs/: the YAML FAQ, then the Markdown FAQ; site/ is not read
    assert pairs == list(faq_yaml_records(FAQ_YML)) + list(markdown_records(MARKDOWN_FAQ))
    assert len(list(docs_records(tmp_path / "bare.git"))) == len(pairs) + len(list(markdown_records(SUPPORT_ARTICLE)))
