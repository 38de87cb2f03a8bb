"""Metrics under ties: against brute-force enumeration of every ordering, and plain
tie-free reimplementations."""

from __future__ import annotations

import itertools
import math
import random
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qaindex.eval.metrics import (
    average_precision,
    evaluate_scores,
    precision_at_1,
    recall_at,
    reciprocal_rank,
    tie_groups,
)

# -- independent reference implementations ---------------------------------------------------


def plain_ap(ranked_labels: list[int]) -> Fraction:
    """AP of one fixed ordering (labels best first)."""
    hits = 0
    total = Fraction(0)
    for rank, label in enumerate(ranked_labels, start=1):
        if label:
            hits += 1
            total += Fraction(hits, rank)
    return total / hits if hits else Fraction(0)


def plain_rr(ranked_labels: list[int]) -> Fraction:
    for rank, label in enumerate(ranked_labels, start=1):
        if label:
            return Fraction(1, rank)
    return Fraction(0)


def plain_p1(ranked_labels: list[int]) -> Fraction:
    return Fraction(int(bool(ranked_labels and ranked_labels[0])))


def brute_force(scores: list[float], labels: list[int]) -> tuple[Fraction, Fraction, Fraction]:
    """Average of AP, RR, P@1 over every ordering of the candidates, sorted stably by score.

    Each permutation, stably sorted by decreasing score, gives one tie-respecting ranking;
    every ranking arises equally often, so this is the exact expectation under uniformly
    random tie-breaking.
    """
    n = len(scores)
    sums = [Fraction(0)] * 3
    count = 0
    for perm in itertools.permutations(range(n)):
        ranked = [labels[i] for i in sorted(perm, key=lambda i: -scores[i])]
        sums[0] += plain_ap(ranked)
        sums[1] += plain_rr(ranked)
        sums[2] += plain_p1(ranked)
        count += 1
    return sums[0] / count, sums[1] / count, sums[2] / count


def random_permutation_ap(n: int, r: int) -> float:
    """E[AP] of a uniformly random ranking of n items with r relevant (closed form)."""
    harmonic = math.fsum(1.0 / k for k in range(1, n + 1))
    if n == 1:
        return 1.0 if r else 0.0
    return (r - 1) / (n - 1) + harmonic * (n - r) / (n * (n - 1))


def random_permutation_rr(n: int, r: int) -> Fraction:
    """E[RR] of a uniformly random ranking: sum_p P(first relevant at p) / p, exact."""
    total = math.comb(n, r)
    return sum((Fraction(math.comb(n - p, r - 1), total) / p for p in range(1, n - r + 2)), Fraction(0))


# -- strategies -------------------------------------------------------------------------------

tied_case = st.integers(min_value=1, max_value=6).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(min_value=0, max_value=3), min_size=n, max_size=n),
        st.lists(st.integers(min_value=0, max_value=1), min_size=n, max_size=n),
    )
)


# -- brute force under ties ----------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tied_case)
def test_metrics_equal_brute_force_over_all_orderings(case: tuple[list[int], list[int]]) -> None:
    scores, labels = case
    ap, rr, p1 = brute_force([float(s) for s in scores], labels)
    assert average_precision(scores, labels) == pytest.approx(float(ap), rel=1e-12, abs=1e-15)
    assert reciprocal_rank(scores, labels) == pytest.approx(float(rr), rel=1e-12, abs=1e-15)
    assert precision_at_1(scores, labels) == pytest.approx(float(p1), rel=1e-12, abs=1e-15)


def test_brute_force_on_seeded_random_cases_with_float_scores() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(1, 8))
        scores = rng.choice([-np.inf, -0.5, 0.25, 0.25, 3.0], size=n).tolist()
        labels = rng.integers(0, 2, size=n).tolist()
        ap, rr, p1 = brute_force(scores, labels)
        assert average_precision(scores, labels) == pytest.approx(float(ap), rel=1e-12, abs=1e-15)
        assert reciprocal_rank(scores, labels) == pytest.approx(float(rr), rel=1e-12, abs=1e-15)
        assert precision_at_1(scores, labels) == pytest.approx(float(p1), rel=1e-12, abs=1e-15)


def brute_force_recall(scores: list[float], labels: list[int], k: int) -> Fraction:
    """Share of the correct candidates in the top k, averaged over every tie-respecting ordering."""
    total, count = Fraction(0), 0
    for perm in itertools.permutations(range(len(scores))):
        ranked = [labels[i] for i in sorted(perm, key=lambda i: -scores[i])]
        total += Fraction(sum(ranked[:k]), max(sum(labels), 1))
        count += 1
    return total / count


@settings(max_examples=150, deadline=None)
@given(tied_case, st.integers(min_value=1, max_value=7))
def test_recall_at_k_equals_brute_force_over_all_orderings(case: tuple[list[int], list[int]], k: int) -> None:
    scores, labels = case
    expected = brute_force_recall([float(s) for s in scores], labels, k)
    assert recall_at(scores, labels, k) == pytest.approx(float(expected), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_recall_at_refuses_a_cut_off_that_is_not_a_positive_whole_number(k: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"k must be a positive integer, got {k!r}")):
        recall_at([0.5], [1], k)  # type: ignore[arg-type]


def test_one_in_ten_recall_counts_the_single_correct_candidate_by_place() -> None:
    # Ubuntu-style 1-in-10: the correct candidate third, then tied with two others at places 2-4
    labels = [1] + [0] * 9
    third = [0.5, 0.9, 0.8] + [0.1] * 7
    assert [recall_at(third, labels, k) for k in (1, 2, 5)] == [0.0, 0.0, 1.0]
    tied = [0.5, 0.9, 0.5, 0.5] + [0.1] * 6
    assert [recall_at(tied, labels, k) for k in (1, 2, 3, 4)] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    result = evaluate_scores([(np.array(third), np.array(labels)), (np.array(tied), np.array(labels))])
    assert (result["r@1"], result["r@2"], result["r@5"]) == pytest.approx((0.0, 1 / 6, 1.0))


# -- tie-free cases against the plain definitions ------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.integers(0, 1)),
        min_size=1,
        max_size=60,
        unique_by=lambda t: t[0],
    )
)
def test_tie_free_metrics_equal_plain_definitions(pairs: list[tuple[float, int]]) -> None:
    scores = [s for s, _ in pairs]
    labels = [y for _, y in pairs]
    ranked = [labels[i] for i in np.argsort(-np.asarray(scores), kind="stable")]
    assert average_precision(scores, labels) == pytest.approx(float(plain_ap(ranked)), rel=1e-12, abs=1e-15)
    assert reciprocal_rank(scores, labels) == pytest.approx(float(plain_rr(ranked)), rel=1e-12, abs=1e-15)
    assert precision_at_1(scores, labels) == float(plain_p1(ranked))


@settings(max_examples=150, deadline=None)
@given(tied_case, st.randoms(use_true_random=False))
def test_candidate_order_never_matters(case: tuple[list[int], list[int]], rnd: random.Random) -> None:
    scores, labels = case
    order = list(range(len(scores)))
    rnd.shuffle(order)
    s2 = [scores[i] for i in order]
    y2 = [labels[i] for i in order]
    assert average_precision(s2, y2) == average_precision(scores, labels)
    assert reciprocal_rank(s2, y2) == reciprocal_rank(scores, labels)
    assert precision_at_1(s2, y2) == precision_at_1(scores, labels)


# -- chance level --------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "r"), [(1, 1), (2, 1), (5, 2), (12, 1), (30, 4), (40, 40), (200, 17)])
def test_constant_scores_give_the_random_permutation_expectation(n: int, r: int) -> None:
    labels = [1] * r + [0] * (n - r)  # positives first, as in TrecQA
    scores = np.zeros(n, dtype=np.float32)
    assert average_precision(scores, labels) == pytest.approx(random_permutation_ap(n, r), rel=1e-12)
    assert reciprocal_rank(scores, labels) == pytest.approx(float(random_permutation_rr(n, r)), rel=1e-12)
    assert precision_at_1(scores, labels) == pytest.approx(r / n, rel=1e-15)


def test_all_equal_scores_score_exactly_at_chance_over_questions() -> None:
    rng = np.random.default_rng(3)
    questions = []
    expected_map, expected_mrr, expected_p1 = [], [], []
    for _ in range(25):
        n = int(rng.integers(1, 40))
        r = int(rng.integers(0, n + 1))
        labels = np.array([1] * r + [0] * (n - r))
        questions.append((np.full(n, 0.125), labels))
        if r:
            expected_map.append(random_permutation_ap(n, r))
            expected_mrr.append(float(random_permutation_rr(n, r)))
            expected_p1.append(r / n)
    result = evaluate_scores(questions)
    assert result["questions"] == len(expected_map)
    assert result["skipped"] == 25 - len(expected_map)
    assert result["map"] == pytest.approx(math.fsum(expected_map) / len(expected_map), rel=1e-12)
    assert result["mrr"] == pytest.approx(math.fsum(expected_mrr) / len(expected_mrr), rel=1e-12)
    assert result["p@1"] == pytest.approx(math.fsum(expected_p1) / len(expected_p1), rel=1e-12)


def test_trecqa_like_order_with_constant_scores_is_not_map_1() -> None:
    # every positive listed first; input order would give MAP = MRR = P@1 = 1
    questions = [(np.zeros(10), np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])), (np.zeros(4), np.array([1, 0, 0, 0]))]
    result = evaluate_scores(questions)
    assert result["map"] < 0.6
    assert result["map"] == pytest.approx((random_permutation_ap(10, 3) + random_permutation_ap(4, 1)) / 2)
    assert result["mrr"] == pytest.approx(float(random_permutation_rr(10, 3) + random_permutation_rr(4, 1)) / 2)
    assert result["p@1"] == pytest.approx((0.3 + 0.25) / 2)
    # while scores that really follow that order do reach 1
    leaked = [(-np.arange(len(y), dtype=float), y) for _, y in questions]
    assert evaluate_scores(leaked)["map"] == 1.0


def test_large_tie_groups_are_finite_and_exact() -> None:
    n, r = 5000, 1200
    labels = np.r_[np.ones(r), np.zeros(n - r)]
    assert average_precision(np.zeros(n), labels) == pytest.approx(random_permutation_ap(n, r), rel=1e-10)
    assert reciprocal_rank(np.zeros(n), labels) == pytest.approx(float(random_permutation_rr(n, r)), rel=1e-10)
    # one correct among many ties, behind a better wrong candidate
    scores = np.r_[1.0, np.zeros(999)]
    labels = np.r_[0, 1, np.zeros(998)]
    assert reciprocal_rank(scores, labels) == pytest.approx(math.fsum(1 / (1 + p) for p in range(1, 1000)) / 999)


# -- small fixed examples ------------------------------------------------------------------


def test_worked_examples() -> None:
    assert average_precision([0.9, 0.5, 0.1], [0, 1, 1]) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert average_precision([1.0, 1.0], [1, 0]) == 0.75
    assert reciprocal_rank([3.0, 2.0, 2.0, 1.0], [0, 0, 1, 1]) == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert precision_at_1([0.9, 0.9, 0.1, 0.9], [1, 0, 1, 0]) == pytest.approx(1 / 3)
    # -0.0 and 0.0 are one score
    assert precision_at_1([0.0, -0.0], [0, 1]) == 0.5
    # bool labels and float32 scores
    assert average_precision(np.array([0.2, 0.7], np.float32), np.array([True, False])) == 0.5


def test_no_correct_candidate_gives_zero() -> None:
    assert average_precision([1.0, 0.5], [0, 0]) == 0.0
    assert reciprocal_rank([1.0, 0.5], [0, 0]) == 0.0
    assert precision_at_1([], []) == 0.0


def test_tie_groups_best_first() -> None:
    sizes, correct = tie_groups([0.5, 0.9, 0.5, 0.1], [1, 0, 1, 0])
    assert sizes.tolist() == [1, 2, 1]
    assert correct.tolist() == [0, 2, 0]


def test_evaluate_scores_skips_questions_without_a_correct_candidate() -> None:
    result = evaluate_scores([([0.9, 0.1], [1, 0]), ([0.5, 0.5], [1, 0]), ([0.3], [0]), ([], [])])
    assert result == {
        "map": 0.875, "mrr": 0.875, "p@1": 0.75, "r@1": 0.75, "r@2": 1.0, "r@5": 1.0, "questions": 2, "skipped": 2,
    }  # fmt: skip


def test_evaluate_scores_with_no_question_is_nan() -> None:
    result = evaluate_scores([([0.3], [0])])
    assert result["questions"] == 0 and result["skipped"] == 1
    assert math.isnan(result["map"]) and math.isnan(result["mrr"]) and math.isnan(result["p@1"])


def test_bad_inputs_are_rejected_with_a_message() -> None:
    with pytest.raises(ValueError) as exc:
        average_precision([0.1, 0.2], [1])
    assert str(exc.value) == "scores and labels must be 1-D arrays of the same length, got shapes (2,) and (1,)"
    with pytest.raises(ValueError) as exc:
        reciprocal_rank([0.1, float("nan")], [1, 0])
    assert str(exc.value) == "scores contain NaN; every candidate needs a comparable score"
    with pytest.raises(ValueError) as exc:
        precision_at_1([0.1, 0.2], [1.0, float("nan")])
    assert str(exc.value) == "labels contain NaN; use 1 for a correct candidate and 0 otherwise"


def test_evaluate_groups_reads_labels_from_the_groups() -> None:
    from qaindex.eval.datasets import Candidate, QuestionGroup
    from qaindex.eval.metrics import evaluate_groups

    groups = [
        QuestionGroup("q1", "?", (Candidate("a", "x", 0), Candidate("b", "y", 1), Candidate("c", "z", 0))),
        QuestionGroup("q2", "?", (Candidate("d", "w", 0),)),
    ]
    scores = [np.array([0.3, 0.2, 0.1]), np.array([1.0])]
    assert evaluate_groups(groups, scores) == evaluate_scores([(scores[0], [0, 1, 0]), (scores[1], [0])])
    assert evaluate_groups(groups, scores)["mrr"] == 0.5
    with pytest.raises(ValueError, match=r"^2 question groups but 1 score arrays$"):
        evaluate_groups(groups, scores[:1])
