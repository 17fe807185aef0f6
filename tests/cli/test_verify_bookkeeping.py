"""`lading verify` checks the bookkeeping files beside the data too: the snapshot's own copy of
its manifest (``snap-<id>/manifest.json``), each shard's ``shard.json`` and each build's
``build.json``. It said "every file matches its checksum" and exited 0 over any of them damaged
(it read only the files ``meta.json`` lists), though a pinned reader reopens the snapshot from
its manifest copy and a later ``lading merge`` reads the shard and build records again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import word_tokenizer
from lading.cli import main


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\tpassage number {i}\n" for i in range(60)))
    return src


def _one_process_store(tmp_path: Path) -> Path:
    assert main(["build", str(_source(tmp_path)), str(tmp_path / "s"), "--quiet"]) == 0
    return tmp_path / "s"


def _merged_store(tmp_path: Path) -> Path:
    src, dest = _source(tmp_path), tmp_path / "m"
    for i in range(2):
        assert main(["build", str(src), str(dest), "--shard", f"{i}/2", "--quiet"]) == 0
    assert main(["merge", str(dest)]) == 0
    return dest


def _snapshot_manifest(store: Path) -> Path:
    meta = json.loads((store / "meta.json").read_text())
    return store / meta["snapshot"] / "manifest.json"


def _edit(path: Path, change: Any) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=2))


def _verify(store: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["verify", str(store)])
    out, err = capsys.readouterr()
    return code, out, err


def test_intact_stores_and_corpora_still_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The new checks find nothing wrong with what the builds write: a one-process store, a
    merged one (shards in build-<id>/, each with shard.json, the build's build.json), a token
    corpus built in one process and one merged from shards."""
    for store in (_one_process_store(tmp_path), _merged_store(tmp_path), *_corpora(tmp_path)):
        code, out, err = _verify(store, capsys)
        assert (code, err) == (0, ""), (store, err)
        assert "every file matches its checksum" in out


def test_a_staged_copy_verifies_without_the_builds_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lading stage`` copies ``meta.json`` and the files it lists, what a reader opens, and
    none of a build's records (``snap-*/manifest.json``, ``shard.json``, ``build.json``): an
    intact staged copy of a store (one process or merged) or a corpus verifies as before (the
    new checks called every one damaged, exit 1, advising a rebuild that stages the same),
    while a changed byte of its data is still found."""
    built = [_one_process_store(tmp_path), _merged_store(tmp_path), *_corpora(tmp_path)]
    for store in built:
        staged = tmp_path / f"{store.name}-staged"
        assert main(["stage", str(store), str(staged), "--quiet"]) == 0
        code, out, err = _verify(staged, capsys)
        assert (code, err) == (0, ""), (staged, err)
        assert "every file matches its checksum" in out
    meta = json.loads((tmp_path / "s-staged" / "meta.json").read_text())
    name = next(f for f in meta["files"] if f.endswith(".bin"))
    data = tmp_path / "s-staged" / name
    data.write_bytes(b"X" + data.read_bytes()[1:])
    assert _verify(tmp_path / "s-staged", capsys)[0] == 1


def _corpora(tmp_path: Path) -> tuple[Path, Path]:
    from lading.lm import TokenCorpus

    src = tmp_path / "t.txt"
    src.write_text("alpha beta\n\ngamma alpha\n\nbeta\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    TokenCorpus.build(src, tmp_path / "corpus", tok, progress=False)
    parts = [tmp_path / "a.txt", tmp_path / "b.txt"]  # (a text file is not split at lines)
    parts[0].write_text("alpha beta\n\ngamma alpha\n")
    parts[1].write_text("beta gamma\n")
    for i in range(2):
        TokenCorpus.build_shard(parts, tmp_path / "merged", (i, 2), tok, progress=False)
    TokenCorpus.merge(tmp_path / "merged")
    return tmp_path / "corpus", tmp_path / "merged"


def test_a_snapshot_manifest_that_disagrees_with_meta_json_is_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _one_process_store(tmp_path)
    manifest = _snapshot_manifest(store)
    name = next(n for n in json.loads(manifest.read_text())["files"] if n.endswith("text.bin"))

    def shrink(record: dict[str, Any]) -> None:
        record["files"][name]["size"] -= 1

    _edit(manifest, shrink)
    code, out, err = _verify(store, capsys)
    assert code == 1 and "every file matches" not in out
    line = next(x for x in err.splitlines() if str(manifest) in x)
    assert name in line and "meta.json" in line and "size" in line, line
    assert "lading build" in line, line  # the fix


def test_a_missing_or_unreadable_snapshot_manifest_is_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _one_process_store(tmp_path)
    manifest = _snapshot_manifest(store)
    manifest.write_text("{not json")
    code, _, err = _verify(store, capsys)
    assert code == 1 and str(manifest) in err and "not valid JSON" in err, err
    manifest.unlink()
    code, _, err = _verify(store, capsys)
    assert code == 1 and f"{manifest} is missing" in err and "cp " in err, err


def test_a_token_corpus_snapshot_manifest_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, _ = _corpora(tmp_path)
    manifest = _snapshot_manifest(corpus)
    _edit(manifest, lambda record: record.update(documents=record["documents"] + 1))
    code, _, err = _verify(corpus, capsys)
    assert code == 1 and str(manifest) in err and "documents" in err, err
    assert "lading lm build" in err, err


def test_a_shard_json_that_disagrees_with_the_store_is_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _merged_store(tmp_path)
    record = next(store.glob("build-*/shard-00000-of-00002/shard.json"))
    _edit(record, lambda r: r.update(rows=r["rows"] + 1))
    code, out, err = _verify(store, capsys)
    assert code == 1 and "every file matches" not in out
    line = next(x for x in err.splitlines() if str(record) in x)
    assert "rows" in line and "meta.json" in line and "lading build" in line, line

    def recrc(r: dict[str, Any]) -> None:
        r["rows"] -= 1
        r["files"]["text.bin"]["crc32"] ^= 1

    _edit(record, recrc)
    code, _, err = _verify(store, capsys)
    assert code == 1 and str(record) in err and "text.bin" in err and "CRC32" in err, err
    record.write_text("[")
    code, _, err = _verify(store, capsys)
    assert code == 1 and str(record) in err and "not valid JSON" in err, err
    record.unlink()
    code, _, err = _verify(store, capsys)
    assert code == 1 and f"{record} is missing" in err, err


def test_a_build_json_that_disagrees_with_the_store_is_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _merged_store(tmp_path)
    record = next(store.glob("build-*/build.json"))
    _edit(record, lambda r: r.update(n=3))
    code, _, err = _verify(store, capsys)
    line = next(x for x in err.splitlines() if str(record) in x)
    assert code == 1 and "3 shards" in line and "2" in line and "lading build" in line, line
    _edit(record, lambda r: r.update(n=2, build_id="build-0000000000000000"))
    code, _, err = _verify(store, capsys)
    assert code == 1 and str(record) in err and "build-0000000000000000" in err, err
    record.unlink()
    code, _, err = _verify(store, capsys)
    assert code == 1 and f"{record} is missing" in err, err


def test_a_corpus_shard_json_that_disagrees_with_the_corpus_is_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, merged = _corpora(tmp_path)
    record = next(merged.glob("build-*/shard-00001-of-00002/shard.json"))
    _edit(record, lambda r: r.update(tokens=r["tokens"] + 5))
    code, _, err = _verify(merged, capsys)
    line = next(x for x in err.splitlines() if str(record) in x)
    assert code == 1 and "tokens" in line and "lading lm build" in line, line


def test_verify_help_lists_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit 0" in text and "1: damage found" in text and "2: nothing to check" in text, text
