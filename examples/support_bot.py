"""A tiny support-desk app that embeds ``qaindex.Ranker``.

It answers a customer's question from the FAQ, suggests related answers, says "I don't know"
when even the best answer is unlikely to be relevant (its score, an estimated probability of
relevance, is below ``--threshold``), and hands the question to a human when the best answer
is not clearly better than the next one.

Run it from the repository root::

    python examples/support_bot.py                   # interactive: type questions
    python examples/support_bot.py "can I get a refund?"
    python examples/support_bot.py --serve 8765      # JSON API on http://127.0.0.1:8765/ask?q=...
    python examples/support_bot.py --threshold 0.7   # answer only when P(relevant) >= 0.7

The index is built from ``examples/faq.jsonl`` on first use and saved to
``examples/.faq-index`` (pass ``--model DIR`` to use a model other than the built-in one).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import qaindex

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "faq.jsonl"
INDEX = HERE / ".faq-index"


@dataclass
class Reply:
    """What the bot says: an answer, related answer ids, "I don't know", or a hand-off to a human."""

    question: str
    answer: str | None
    answer_id: str | int | None
    related: list[str | int]
    handoff: bool
    unknown: bool = False  # no answer is likely enough to be relevant
    score: float | None = None  # the best answer's estimated probability of relevance

    def to_json(self) -> dict[str, object]:
        return self.__dict__.copy()


class SupportBot:
    """Answers questions from a FAQ index.

    Parameters
    ----------
    ranker : qaindex.Ranker
        The FAQ index.
    margin : float
        Hand off to a human when the best score beats the runner-up by less than this.
    threshold : float
        Say "I don't know" when the best answer's score (the estimated probability that it is
        relevant, in [0, 1]) is below this.
    """

    def __init__(self, ranker: qaindex.Ranker, margin: float = 0.02, threshold: float = 0.35) -> None:
        self.ranker = ranker
        self.margin = margin
        self.threshold = threshold

    @classmethod
    def open(cls, model: str | None = None) -> SupportBot:
        """Load the saved index, or build and save it on first use."""
        if (INDEX / "manifest.json").is_file():
            return cls(qaindex.Ranker.load(INDEX))
        ranker = qaindex.Ranker.build(CORPUS, model=model)
        ranker.save(INDEX)
        return cls(ranker)

    def ask(self, question: str) -> Reply:
        hits = self.ranker.search(question, k=4)
        best = hits[0]
        if best.score < self.threshold:
            return Reply(question, None, None, [h.id for h in hits], handoff=True, unknown=True, score=best.score)
        runner_up = hits[1].score if len(hits) > 1 else float("-inf")
        handoff = best.score - runner_up < self.margin
        return Reply(
            question=question,
            answer=None if handoff else best.answer,
            answer_id=None if handoff else best.id,
            related=[h.id for h in (hits if handoff else hits[1:])],
            handoff=handoff,
            score=best.score,
        )


def _print(reply: Reply) -> None:
    if reply.unknown:
        print("I don't know; a colleague will follow up. Maybe related:", ", ".join(map(str, reply.related)))
    elif reply.handoff:
        print("I'm not sure; a colleague will follow up. Maybe related:", ", ".join(map(str, reply.related)))
    else:
        print(reply.answer)
        print("  related:", ", ".join(map(str, reply.related)))


def serve(bot: SupportBot, port: int) -> None:
    """Serve ``GET /ask?q=...`` as JSON on 127.0.0.1 until interrupted."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            question = parse_qs(url.query).get("q", [""])[0]
            try:
                if url.path != "/ask":
                    raise qaindex.QueryError("use GET /ask?q=your+question")
                status, body = 200, bot.ask(question).to_json()
            except qaindex.QAIndexError as exc:
                status, body = 400, {"error": str(exc)}
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"serving on http://127.0.0.1:{port}/ask?q=...", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("question", nargs="*", help="a question (interactive when omitted)")
    parser.add_argument("--model", help="model directory (default: the built-in model)")
    parser.add_argument("--serve", type=int, metavar="PORT", help="serve a JSON API on 127.0.0.1:PORT")
    parser.add_argument(
        "--threshold", type=float, default=0.35, help="say I don't know below this score (probability of relevance)"
    )
    args = parser.parse_args(argv)
    try:
        bot = SupportBot.open(args.model)
        bot.threshold = args.threshold
        if args.serve:
            serve(bot, args.serve)
        elif args.question:
            _print(bot.ask(" ".join(args.question)))
        else:
            for line in sys.stdin:
                if line.strip():
                    _print(bot.ask(line.strip()))
    except qaindex.QAIndexError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
