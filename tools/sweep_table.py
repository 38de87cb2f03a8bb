"""A Markdown table of a ``build_default_model`` sweeps file: recipes averaged over their seeds.

Each recipe is a label and the variants (seeds) of the sweeps file that ran it; the table gives
each user corpus's whole-corpus MRR@10 of the current default, of every recipe (the mean over
its variants, and the range of its mean MRR@10 over them), of bm25s and of MiniLM, all from the
same runs, and each recipe's ratio to MiniLM.

Usage::

    python -m tools.sweep_table benchmarks/results/round3_squad_sweeps.json \\
        --recipe "pairs, 1 epoch=pairs_only_1epoch,pairs_only_1epoch_seed1" [--recipe ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def sweep_table(sweeps: dict[str, Any], recipes: list[tuple[str, list[str]]]) -> str:
    """The Markdown table (see the module docstring).

    Example
    -------
    >>> at = lambda x: {"a": {"mrr@10": x}}
    >>> run = lambda x: {"candidate": {"pooled": at(x)}, "previous_default": {"pooled": at(0.5)},
    ...                  "bm25s_stemmed": at(0.4), "minilm_exact_cosine": {"pooled": at(0.8)}}
    >>> print(sweep_table({"s0": run(0.6), "s1": run(0.7)}, [("r", ["s0", "s1"])]))
    | corpus | current default | r (2 runs) | bm25s | MiniLM | r / MiniLM |
    |---|---|---|---|---|---|
    | a | 0.500 | 0.650 | 0.400 | 0.800 | 0.81× |
    | **mean** | 0.500 | 0.650 (0.600–0.700) | 0.400 | 0.800 | 0.81× |
    """
    first = sweeps[recipes[0][1][0]]
    corpora = list(first["candidate"]["pooled"])

    def mrr(pooled: dict[str, Any], corpus: str) -> float:
        return float(pooled[corpus]["mrr@10"])

    default, minilm = first["previous_default"]["pooled"], first["minilm_exact_cosine"]["pooled"]
    bm25 = first["bm25s_stemmed"]
    per_recipe = {
        label: {c: _mean([mrr(sweeps[v]["candidate"]["pooled"], c) for v in variants]) for c in corpora}
        for label, variants in recipes
    }
    head = (
        ["corpus", "current default"]
        + [f"{label} ({len(v)} run{'s' if len(v) > 1 else ''})" for label, v in recipes]
        + ["bm25s", "MiniLM"]
    )
    head += [f"{label} / MiniLM" for label, _ in recipes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in corpora:
        row = [c, f"{mrr(default, c):.3f}"] + [f"{per_recipe[label][c]:.3f}" for label, _ in recipes]
        row += [f"{mrr(bm25, c):.3f}", f"{mrr(minilm, c):.3f}"]
        row += [f"{per_recipe[label][c] / mrr(minilm, c):.2f}×" for label, _ in recipes]
        lines.append("| " + " | ".join(row) + " |")
    means = []
    for _label, variants in recipes:
        each = [_mean([mrr(sweeps[v]["candidate"]["pooled"], c) for c in corpora]) for v in variants]
        spread = f" ({min(each):.3f}–{max(each):.3f})" if len(each) > 1 else ""
        means.append(f"{_mean(each):.3f}{spread}")
    mini_mean = _mean([mrr(minilm, c) for c in corpora])
    row = ["**mean**", f"{_mean([mrr(default, c) for c in corpora]):.3f}", *means]
    row += [f"{_mean([mrr(bm25, c) for c in corpora]):.3f}", f"{mini_mean:.3f}"]
    row += [f"{_mean(list(per_recipe[label].values())) / mini_mean:.2f}×" for label, _ in recipes]
    lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def table_for(argv: list[str] | None = None) -> str:
    """The table of a command line (``SWEEPS --recipe LABEL=VARIANT,... ...``), as :func:`main` prints it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", type=Path, help="a sweeps file of build_default_model (--results)")
    parser.add_argument(
        "--recipe", action="append", required=True, metavar="LABEL=VARIANT,...", help="a recipe and its variants"
    )
    args = parser.parse_args(argv)
    sweeps = json.loads(args.sweeps.read_text(encoding="utf-8"))
    recipes = []
    for spec in args.recipe:
        label, _, variants = spec.partition("=")
        recipes.append((label, [v for v in variants.split(",") if v]))
    return sweep_table(sweeps, recipes)


def main() -> None:
    print(table_for())


if __name__ == "__main__":
    main()
