"""tools/build_default_model.py: the model card's list of training sources."""

from __future__ import annotations

from tools.build_default_model import card_sources, start_of


def _corpus(texts: dict[str, int], pairs: dict[str, int]) -> dict[str, object]:
    sources = {k: {"what": f"{k} texts", "licence": "CC BY-SA 3.0" if k.startswith("se-") else "PSF"} for k in texts}
    return {"teacher_vectors_by_source": texts, "pairs_by_source": pairs, "sources": sources}


def test_a_continued_model_credits_its_start_corpus_and_its_own() -> None:
    start = {"model": "m", "name": "old-default", "corpus": _corpus({"pydoc": 10, "se-beer": 2}, {"pydoc": 3})}
    recipe = {"corpus": _corpus({"se-beer": 5, "se-ai": 0}, {"se-beer": 4}), "start": start}
    lines = card_sources(recipe).splitlines()
    # counts add up over both corpora; a source with nothing in either is not listed
    assert lines == [
        "- **se-beer**: se-beer texts — licence: CC BY-SA 3.0; 7 texts with a teacher vector, 4 question → answer pairs",
        "- **pydoc**: pydoc texts — licence: PSF; 10 texts with a teacher vector, 3 question → answer pairs",
    ]
    assert card_sources({"corpus": recipe["corpus"]}).splitlines() == [lines[0].replace("7 texts", "5 texts")]


def test_start_of_reads_old_and_new_recipes() -> None:
    assert start_of({}) == {}
    assert start_of({"start": "models/x"}) == {"model": "models/x", "name": "models/x", "corpus": {}}
    assert start_of({"start": {"model": "m", "name": "n", "corpus": {}}})["name"] == "n"
