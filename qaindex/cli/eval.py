"""``qaindex eval`` and ``qaindex inspect``: measure a model on labelled data, look inside it.

The commands are registered into the ``qaindex`` group by :mod:`qaindex.cli`
(``main.add_command(eval_command)``, ``main.add_command(inspect_command)``), whose
``invoke`` turns a :class:`~qaindex.errors.QAIndexError` into a one-line message and exit
code 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..errors import CorpusError
from ..eval.datasets import QuestionGroup, read_labelled
from ..model import DEFAULT_MODEL_DIR
from ..vector_index import INDEX_KINDS
from .options import batch_size_option, device_option

__all__ = ["eval_command", "inspect_command"]

_MODEL_DIR = click.Path()  # kept as typed: the word "default" names the built-in model, "./default" a directory
_BUILT_IN = f"MODEL_DIR may be the word `default`: the built-in model, installed in {DEFAULT_MODEL_DIR}."
_DATA_FILE = click.Path(path_type=Path, dir_okay=False)


def _load_model(model_dir: str, device: str) -> Any:
    from ..model import Model

    return Model.load(model_dir, device=device, threads=None)


def _read_data(data: Path) -> list[QuestionGroup]:
    groups = read_labelled(data)
    if not any(g.has_positive for g in groups):
        raise CorpusError(
            f"{data}: no question has a correct candidate (label 1), so MAP and MRR are undefined; check the labels"
        )
    return groups


@click.command("eval", epilog=_BUILT_IN)
@click.argument("model_dir", type=_MODEL_DIR)
@click.argument("data", type=_DATA_FILE)
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option(
    "--via-index",
    is_flag=True,
    help="Score through the served path (an index over every answer of DATA, full ranking per question) "
    "instead of calling the model's scorer on each question's candidates.",
)
@click.option(
    "--pool",
    is_flag=True,
    help="Whole-corpus evaluation: index every distinct answer of DATA, search each question against all "
    "of them (FAISS + exact rerank) and report MRR@k, recall@k and P@1.",
)
@click.option(
    "-k",
    "k",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Cut-off of MRR and recall for --pool.",
)
@click.option(
    "--index-kind",
    type=click.Choice(INDEX_KINDS),
    default="auto",
    show_default=True,
    help="FAISS index kind for --via-index and --pool.",
)
@device_option()
@batch_size_option("Texts per encoder call (and questions per scorer call).")
def eval_command(
    model_dir: str,
    data: Path,
    as_json: bool,
    via_index: bool,
    pool: bool,
    k: int,
    index_kind: str,
    device: str,
    batch_size: int,
) -> None:
    """Evaluate MODEL_DIR on DATA (labelled JSONL): MAP, MRR and P@1.

    DATA is the benchmark format (qid, question, aid, answer, label per line) or a corpus
    with questions (a question is correct for every answer listing it, wrong for the others;
    the same question text under several answers counts once).
    Each question's candidates are ranked by score; tied scores count as the expected
    value over random orderings, never by their order in the file. Questions without a
    correct candidate are skipped.

    With --pool, every question is searched against every distinct answer of DATA instead
    (how the library is used) and MRR@k, recall@k and P@1 of the top k are reported.
    """
    from ..eval.evaluate import evaluate_model, evaluate_via_index

    if pool and via_index:
        raise click.UsageError("choose one of --pool and --via-index")
    groups = _read_data(data)
    from ..reranker import Reranker, model_kind

    if model_kind(model_dir) == "reranker":  # a joint scorer (AP-CNN): each question's own candidates only
        if pool or via_index:
            raise click.UsageError(
                f"{model_dir} is a reranker, which cannot index answers: --pool and --via-index need a "
                "dual-encoder --model; drop them to rank each question's candidates with the reranker"
            )
        model: Any = Reranker.load(model_dir, device=device, threads=None)
    else:
        model = _load_model(model_dir, device)
    if pool:
        _echo_pooled(model, groups, data, k, index_kind, device, batch_size, as_json)
        return
    if via_index:
        result = evaluate_via_index(model, groups, index_kind=index_kind, device=device, batch_size=batch_size)
    else:
        result = evaluate_model(model, groups, batch_size=batch_size)
    result = {
        **result,
        "model": model.name,
        "data": str(data),
        "via_index": via_index,
    }
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False))
        return
    lines = [
        *_header(model, data),
        f"scored by   {'the index (full ranking)' if via_index else 'the model scorer'}"
        + (" (a reranker: each pair jointly)" if isinstance(model, Reranker) else ""),
        f"questions   {result['questions']} evaluated, {result['skipped']} skipped (no correct candidate)",
        f"candidates  {result['candidates']} pairs, {result['answers']} distinct answers",
        f"MAP         {result['map']:.4f}",
        f"MRR         {result['mrr']:.4f}",
        f"P@1         {result['p@1']:.4f}",
        f"R@1/2/5     {result['r@1']:.4f} / {result['r@2']:.4f} / {result['r@5']:.4f}  "
        "(share of a question's correct candidates in its top 1, 2, 5)",
        "ties count as the expected value over random orderings",
    ]
    click.echo("\n".join(lines))


def _header(model: Any, data: Path) -> list[str]:
    return [f"model       {model.name} ({model.geometry}, dimension {model.dimension})", f"data        {data}"]


def _echo_pooled(
    model: Any,
    groups: list[QuestionGroup],
    data: Path,
    k: int,
    index_kind: str,
    device: str,
    batch_size: int,
    as_json: bool,
) -> None:
    from ..eval.evaluate import evaluate_pooled

    result = evaluate_pooled(model, groups, k=k, index_kind=index_kind, device=device, batch_size=batch_size)
    result = {**result, "model": model.name, "data": str(data), "pool": True}
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False))
        return
    lines = [
        *_header(model, data),
        f"scored by   search over the whole pool ({result['answers']} distinct answers, top {k})",
        f"questions   {result['questions']} evaluated, {result['skipped']} skipped (no correct candidate)",
        f"MRR@{k:<7} {result[f'mrr@{k}']:.4f}",
        f"recall@{k:<4} {result[f'recall@{k}']:.4f}",
        f"P@1         {result['p@1']:.4f}",
    ]
    click.echo("\n".join(lines))


@click.command("inspect", epilog=_BUILT_IN)
@click.argument("model_dir", type=_MODEL_DIR)
@click.argument("data", type=_DATA_FILE, required=False)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also draw the norm histograms and a 2-D view of the ball into this image (needs qaindex[plot]).",
)
@click.option("--levels", type=click.IntRange(min=1), default=5, show_default=True, help="Number of word norm bands.")
@click.option(
    "--per-level", type=click.IntRange(min=1), default=10, show_default=True, help="Words listed per norm band."
)
@click.option("--bins", type=click.IntRange(min=1), default=20, show_default=True, help="Bins of the norm histograms.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@device_option()
def inspect_command(
    model_dir: str,
    data: Path | None,
    plot_path: Path | None,
    levels: int,
    per_level: int,
    bins: int,
    as_json: bool,
    device: str,
) -> None:
    """Show where MODEL_DIR puts questions, answers and words in the ball (vector norms).

    With DATA (labelled JSONL or a corpus with questions), its questions and distinct
    answers are encoded and the word bands list the words most frequent in DATA. Without
    it, every single-token vocabulary word is encoded in both roles and the bands list
    words in vocabulary order.
    """
    from ..eval.inspect import norm_report, plot, single_token_words, word_frequencies, word_levels

    model = _load_model(model_dir, device)
    texts: list[QuestionGroup] | list[str]
    if data is not None:
        groups = read_labelled(data)
        texts = groups
        answers = list(dict.fromkeys(c.answer for g in groups for c in g.candidates))
        words: dict[str, int] | None = dict(word_frequencies(model, [g.question for g in groups] + answers))
        source = f"{data} ({len(groups)} questions, {len(answers)} distinct answers)"
    else:
        texts = single_token_words(model)
        if not texts:
            raise CorpusError(
                f"{model_dir}: no vocabulary word encodes as a single token; give DATA to inspect the model"
            )
        words = None
        source = f"vocabulary words ({len(texts)}), each encoded as a question and as an answer"
    report = norm_report(model, texts, bins=bins)
    bands = word_levels(model, words, levels, per_level)
    if plot_path is not None:
        plot(report, plot_path)
    if as_json:
        out = {
            "source": source,
            "norms": {k: v for k, v in report.items() if k != "ball_2d"},
            "word_levels": [
                {"level": f"H{i}", "low": low, "high": high, "words": ws}
                for i, ((low, high), ws) in enumerate(bands, start=1)
            ],
            "plot": str(plot_path) if plot_path is not None else None,
        }
        click.echo(json.dumps(out, ensure_ascii=False))
        return
    click.echo("\n".join(_inspect_lines(model, source, report, bands, words is not None, plot_path)))


def _inspect_lines(
    model: Any,
    source: str,
    report: dict[str, Any],
    bands: list[tuple[tuple[float, float], list[str]]],
    by_frequency: bool,
    plot_path: Path | None,
) -> list[str]:
    geometry = f"{model.geometry}, dimension {model.dimension}"
    if model.max_norm is not None:
        geometry += f", max norm {model.max_norm}"
    lines = [f"model      {model.name} ({geometry})", f"source     {source}"]
    if not model.space.ball:
        lines.append("note       a cosine model's scores ignore vector norms")
    cols = ["count", "mean", "min", *report["question"]["percentiles"], "max"]
    lines.append("norms      " + " ".join(f"{c:>7}" for c in cols))
    for role in ("question", "answer"):
        s = report[role]
        values = [s["mean"], s["min"], *s["percentiles"].values(), s["max"]]
        lines.append(f"{role + 's':<10} {s['count']:>7} " + " ".join(f"{v:>7.4f}" for v in values))
    lines.append("histogram  norm range        questions  answers")
    hist = report["histogram"]
    edges = hist["edges"]
    for i, (q, a) in enumerate(zip(hist["question"], hist["answer"], strict=True)):
        if q or a:
            lines.append(f"           {edges[i]:.4f}-{edges[i + 1]:.4f}  {q:>9}  {a:>7}")
    order = "most frequent in the data first" if by_frequency else "vocabulary order"
    lines.append(f"word levels (single words encoded alone, lowest norm first; {order})")
    if not bands:
        lines.append("           no word of the data is a single vocabulary token")
    for i, ((low, high), ws) in enumerate(bands, start=1):
        shown = ", ".join(ws) if ws else "-"
        lines.append(f"  H{i:<2} {low:.4f}-{high:.4f}  {shown}")
    if plot_path is not None:
        lines.append(f"plot       {plot_path}")
    return lines
