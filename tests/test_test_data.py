"""tests/data, the repository's copy of test data written by others: the copy is whole (every MSCCL file has the
sha256 its SOURCES.md records, every published table names its source) and tests/data/refresh.py copies new
and changed files, keeps the ones only here and writes nothing under --check."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

_spec = importlib.util.spec_from_file_location("refresh", DATA / "refresh.py")
assert _spec is not None and _spec.loader is not None
refresh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refresh)


def test_the_msccl_copy_matches_the_sha256_its_sources_record() -> None:
    corpus = DATA / "foreign" / "msccl"
    sums = re.findall(r"^([0-9a-f]{64})  (\S+\.xml)$", (corpus / "SOURCES.md").read_text(), re.M)
    recorded = {name: digest for digest, name in sums}
    assert len(recorded) == 33 and sorted(recorded) == sorted(p.name for p in corpus.glob("*.xml"))
    for name, digest in recorded.items():
        assert hashlib.sha256((corpus / name).read_bytes()).hexdigest() == digest, name
    assert (corpus / "FORMAT.md").is_file()


def test_every_published_table_names_its_source() -> None:
    tables = sorted((DATA / "published").glob("*.tsv"))
    assert len(tables) == 13 and (DATA / "published" / "README.md").is_file()
    for table in tables:
        assert table.read_text(encoding="utf-8").startswith("# source: "), table.name


def test_refresh_copies_new_and_changed_files_and_keeps_the_rest(tmp_path: Path) -> None:
    source, dest = tmp_path / "source", tmp_path / "dest"
    (source / "published").mkdir(parents=True)
    (source / "foreign" / "msccl").mkdir(parents=True)
    (source / "published" / "a.tsv").write_text("one")
    (source / "foreign" / "msccl" / "b.xml").write_text("<algo/>")
    # First time: both copied; foreign/mscclpp is absent from this source and named.
    assert refresh.refresh(source, dest) == (["published/a.tsv", "foreign/msccl/b.xml"], [], ["foreign/mscclpp"])
    assert (dest / "published" / "a.tsv").read_text() == "one"
    assert refresh.refresh(source, dest)[0] == []  # nothing changed: nothing copied
    (source / "published" / "a.tsv").write_text("two")  # same size would do too: bytes are compared
    (dest / "published" / "old.tsv").write_text("dropped upstream")
    assert refresh.refresh(source, dest, check=True)[:2] == (["published/a.tsv"], ["published/old.tsv"])
    assert (dest / "published" / "a.tsv").read_text() == "one"  # --check wrote nothing
    assert refresh.main(["--shared", str(tmp_path / "missing")]) == 2
    refresh.refresh(source, dest)
    assert (dest / "published" / "a.tsv").read_text() == "two" and (dest / "published" / "old.tsv").is_file()
