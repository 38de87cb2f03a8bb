"""The fusion-pseudo study: its cloze questions cut from their answers and no other, and its
fused MRR@10 equal to what the runtime's fusion ranks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.quality import fusion_pseudo
from qaindex.eval.fusion_fit import FitPool
from qaindex.search.fusion import Fusion


def test_cloze_cuts_one_sentence_from_each_chosen_answer_and_leaves_the_others_whole() -> None:
    long = "Alpha beta gamma delta epsilon. Zeta eta theta iota kappa. Lambda mu nu xi omicron pi."
    answers = [long.replace("Alpha", f"Alpha{i}") for i in range(5)] + ["Too short to cut.", "One. Two."]
    texts, questions, source = fusion_pseudo.cloze(answers, n=3, seed=1)
    assert len(questions) == 3 and len(set(source)) == 3 and set(source) <= set(range(5))
    for i, (before, after) in enumerate(zip(answers, texts, strict=True)):
        if i in source:
            q = questions[source.index(i)]
            assert q in before and q not in after and len(after.split()) == len(before.split()) - len(q.split())
        else:
            assert after == before


def _pool(rng: np.random.Generator, n: int = 30) -> FitPool:
    rows = [np.arange(12) for _ in range(n)]
    dense = [rng.normal(size=12).astype(np.float32) for _ in range(n)]
    lexical = [np.where(rng.random(12) < 0.5, rng.exponential(3.0, 12), 0.0) for _ in range(n)]
    return FitPool("p", 0.6, rows, dense, lexical, rng.integers(1, 12, n).tolist(), rng.random(n).tolist(),
                   [{int(rng.integers(12))} for _ in range(n)])  # fmt: skip


def _brute_force_mrr(pool: FitPool, weight_of: Callable[[int], float]) -> float:
    """Each question's candidates fused by hand: ``w * clip((s - s_min) / (s_max - s_min)) + (1 - w) * bm25 / max bm25``
    (fewer candidates than the floor: ``s_D`` is the lowest score), ties by higher model score, then lower row."""
    rr = []
    for i in range(len(pool)):
        s, b, rows = pool.dense[i].astype(np.float64), pool.lexical[i], pool.rows[i]
        w = weight_of(i)
        fused = w * np.clip((s - s.min()) / (s.max() - s.min()), 0, 1) + (1 - w) * (
            b / b.max() if b.max() > 0 else 0 * b
        )
        order = sorted(range(len(rows)), key=lambda j: (-fused[j], -s[j], rows[j]))
        rank = next((r for r, j in enumerate(order[:10], start=1) if int(rows[j]) in pool.relevant[i]), None)
        rr.append(0.0 if rank is None else 1.0 / rank)
    return float(np.mean(rr))


def test_fused_mrr_matches_a_hand_fusion_at_the_stored_rule_and_at_every_corpus_part() -> None:
    pool = _pool(np.random.default_rng(0))
    stored = Fusion("adaptive", weight=0.5, a=0.2, b=1.0, d=1.25, e=0.5, terms=6.0)

    def weight(corpus_part: float) -> Callable[[int], float]:
        return lambda i: corpus_part * min(max(1.25 - 0.5 * pool.coverage[i], 0.0), 1.0) * min(1.0, 6.0 / pool.terms[i])

    assert np.isclose(fusion_pseudo.mrr_at(stored, pool, None), _brute_force_mrr(pool, weight(min(0.2 + 0.6, 1.0))))
    for part in (0.0, 0.3, 1.0):
        assert np.isclose(fusion_pseudo.mrr_at(stored, pool, part), _brute_force_mrr(pool, weight(part)))
    # part 1 with no question or length part is the model's own ranking
    assert np.isclose(fusion_pseudo.mrr_at(Fusion("adaptive", a=1.0, b=0.0), pool, 1.0), pool.parts()[0])
