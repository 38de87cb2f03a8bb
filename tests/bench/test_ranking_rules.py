"""The ranking-rules study: its reciprocal ranks against a brute-force sort, and its served rule
ranking exactly as the built-in model's own scorer does."""

from __future__ import annotations

import numpy as np

from benchmarks.quality import ranking_rules
from qaindex.model import DEFAULT_MODEL_DIR, Model


def test_reciprocal_ranks_match_a_brute_force_sort_with_ties_against_the_answer() -> None:
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, size=(40, 25)).astype(float)  # many ties
    relevant = [rng.choice(25, size=rng.integers(1, 4), replace=False) for _ in range(40)]
    got = ranking_rules.reciprocal_ranks(scores, relevant, k=10)
    for row, rel, rr in zip(scores, relevant, got, strict=True):
        best = max(rel.tolist(), key=lambda j: row[j])
        # brute force: sort the other answers and the best correct one, ties placing the others first
        order = sorted([j for j in range(25) if j not in rel] + [best], key=lambda j: (-row[j], j == best))
        rank = order.index(best) + 1
        assert rr == (1.0 / rank if rank <= 10 else 0.0)


def test_the_served_rule_ranks_as_the_model_scores() -> None:
    model = Model.load(DEFAULT_MODEL_DIR)
    answers = ["Reset your password from the sign-in page.", "We ship to Canada.", "!!!", "Refunds take 5 days."]
    questions = ["how do i reset my password", "do you ship abroad"]
    a = np.asarray(model.encode(answers, role="answer"), dtype=np.float64)
    q = np.asarray(model.encode(questions, role="question"), dtype=np.float64)
    served, _ = model.score(q.astype(np.float32), np.broadcast_to(a.astype(np.float32), (len(q), *a.shape)))
    mine = ranking_rules.RULES["relative (served)"](q, a)
    np.testing.assert_array_equal(np.argsort(-mine, axis=1), np.argsort(-np.asarray(served), axis=1))
    np.testing.assert_allclose(mine, served, rtol=1e-4, atol=1e-4)
