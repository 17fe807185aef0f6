"""A manifest's layout names (columns, index, offsets, tokenizer, a corpus's ``dir``) are
checked like its file list: relative, inside the directory, listed; the snapshot sweep never
follows a symlink out of the store (issue 39, items 1 and 3). The fuzz over every field is
``test_hostile_manifests.py``."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import lading
from conftest import word_tokenizer, write
from lading.disk import snapshot
from lading.disk.stage import stage
from lading.errors import StoreFormatError
from lading.stores import verify_store


def _tsv(path: Path, word: str) -> Path:
    return write(path, "".join(f"d{i}\t{word} {i}\n" for i in range(6)))


def _meta(store: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((store / "meta.json").read_text())
    return meta


def _save(store: Path, meta: dict[str, Any]) -> None:
    (store / "meta.json").write_text(json.dumps(meta))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A store of "good" texts and, beside it, one of "EVIL" texts with the same ids."""
    good = lading.build_store(_tsv(tmp_path / "g.tsv", "good"), tmp_path / "s", progress=False)
    lading.build_store(_tsv(tmp_path / "e.tsv", "EVIL"), tmp_path / "evil", progress=False)
    return good.path, tmp_path / "evil"


def _point_text_at_evil(store: Path, evil: Path, how: str) -> None:
    meta = _meta(store)
    column = meta["shards"][0]["columns"]["text"]
    theirs = _meta(evil)["shards"][0]["columns"]["text"]
    for key in ("data", "offsets"):
        if how == "dotdot":
            column[key] = f"../evil/{theirs[key]}"
        elif how == "absolute":
            column[key] = str(evil / theirs[key])
        elif how == "symlink":  # a link inside the store, listed with the outside file's sums
            link = f"{meta['snapshot']}/link-{key}"
            os.symlink(evil / theirs[key], store / link)
            meta["files"][link] = _meta(evil)["files"][theirs[key]]
            column[key] = link
    _save(store, meta)


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_column_outside_the_store_is_refused_by_every_reader(
    pair: tuple[Path, Path], tmp_path: Path, how: str
) -> None:
    store, evil = pair
    _point_text_at_evil(store, evil, how)
    # the old code served "EVIL 1" from open_store, verify_store said [] and stage copied it
    field = "files" if how == "symlink" else r"shards\[0\]\.columns\.text\.data ="
    with pytest.raises(StoreFormatError, match=rf"{field}.*outside the store"):
        lading.open_store(store)
    [problem] = verify_store(store)
    assert "outside the store" in problem and "\n" not in problem
    with pytest.raises(StoreFormatError, match=rf"{field}.*outside the store"):
        stage(store, tmp_path / "staged")
    assert not (tmp_path / "staged").exists()


def test_a_layout_name_the_file_list_lacks_is_refused(pair: tuple[Path, Path]) -> None:
    store, _ = pair
    meta = _meta(store)
    data = meta["shards"][0]["columns"]["text"]["data"]
    shutil.copy(store / data, store / meta["snapshot"] / "planted.bin")  # inside, not listed
    meta["shards"][0]["columns"]["text"]["data"] = f"{meta['snapshot']}/planted.bin"
    _save(store, meta)
    with pytest.raises(StoreFormatError, match="not in the manifest's file list"):
        lading.open_store(store)


@pytest.mark.parametrize(
    "field, value",
    [
        (("index", "dir"), "../evil"),
        (("index", "kind"), "mystery"),
        (("global_offsets", "text"), "/etc/passwd"),
        (("shards", 0, "rows"), -1),
        (("shards", 0, "columns", "ids", "offsets"), "a\x00b"),
        (("shards", 0, "columns", "ids", "data"), "x/" + "y" * 300),
        (("shards",), {"0": 1}),
    ],
)
def test_each_layout_field_is_named_when_refused(
    pair: tuple[Path, Path], field: tuple[Any, ...], value: object
) -> None:
    store, _ = pair
    meta = _meta(store)
    holder: Any = meta
    for key in field[:-1]:  # global_offsets: only in stores merged before issue 49
        holder = holder.setdefault(key, {}) if key == "global_offsets" else holder[key]
    holder[field[-1]] = value
    _save(store, meta)
    with pytest.raises(StoreFormatError) as caught:
        lading.open_store(store)
    message = str(caught.value)
    named = field[0] if field[0] != "shards" or len(field) == 1 else "shards[0]"
    assert named in message and "\n" not in message and str(store / "meta.json") in message


def test_a_corpus_dir_outside_is_refused(tmp_path: Path) -> None:
    from lading.lm import TokenCorpus

    src = write(tmp_path / "docs.txt", "alpha beta\n\ngamma alpha\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "t.json")
    corpus = TokenCorpus.build(src, tmp_path / "c", tok)
    other = TokenCorpus.build(src, tmp_path / "other", tok)
    meta = _meta(corpus.path)
    meta["dir"] = f"../other/{other.meta['dir']}"
    _save(corpus.path, meta)
    with pytest.raises(StoreFormatError, match=r"dir = '\.\./other/.*outside the store"):
        TokenCorpus.open(corpus.path)


def test_check_name_refuses_what_tar_refuses() -> None:
    from lading.disk.names import check_name

    for bad in ["", "/abs", "a/../b", "..", "./a", "a//b", "a\\b", "a\x00", 7, None, "é" * 200]:
        with pytest.raises(StoreFormatError, match="field-x"):
            check_name(bad, "field-x", "meta.json")
    assert check_name("snap-1/shard-0/text.bin", "f", "m") == "snap-1/shard-0/text.bin"
    assert check_name("", "f", "m", directory=True) == ""


def test_the_sweep_never_follows_a_symlinked_snapshot_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(snapshot.GRACE_ENV, "0")
    a, b = _tsv(tmp_path / "a.tsv", "a"), _tsv(tmp_path / "b.tsv", "b")
    outside = tmp_path / "outside"
    outside.mkdir()
    write(outside / "manifest.json", "precious")
    write(outside / snapshot.BUILD_MARK, "{}")
    write(outside / "data.bin", "also precious")
    store = tmp_path / "s"
    lading.build_store(a, store, progress=False)
    os.symlink(outside, store / "snap-20200101T000000Z-deadbeef")  # as a snapshot is named
    os.symlink(outside, store / "build-0123456789abcdef")  # holds a build.json through it
    old = os.path.getmtime(outside / "data.bin") - 10 * 24 * 3600
    os.utime(outside / "data.bin", (old, old))  # "abandoned" by its mtime
    # the old code unlinked outside/manifest.json here
    lading.build_store(b, store, progress=False)
    assert (outside / "manifest.json").read_text() == "precious"
    assert sorted(p.name for p in outside.iterdir()) == ["build.json", "data.bin", "manifest.json"]
    assert (store / "snap-20200101T000000Z-deadbeef").is_symlink()  # not ours: left alone


def test_a_bucket_manifest_naming_outside_is_refused_before_anything_is_staged(
    bucket: str, tmp_path: Path
) -> None:
    from lading.remote.clients import open_client

    src = _tsv(tmp_path / "g.tsv", "good")
    url = f"s3://{bucket}/stores/s"
    lading.build_store(src, url, cache=str(tmp_path / "build-cache"), progress=False)
    client = open_client(url)
    meta = json.loads(client.get("meta.json"))
    meta["shards"][0]["columns"]["ids"]["offsets"] = "../../../../../../tmp/evil.off"
    meta["index"]["dir"] = str(tmp_path / "elsewhere")
    client.put("meta.json", json.dumps(meta).encode())
    cache = tmp_path / "cache"
    with pytest.raises(StoreFormatError, match=r"meta\.json: (shards\[0\]|index).*outside"):
        lading.open_store(url, cache=cache, cache_bytes="1M")
    assert not (tmp_path / "elsewhere").exists()
    staged = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    assert not [p for p in staged if p.suffix in (".off", ".keys", ".table")]


def test_a_hostile_history_makes_the_sweep_remove_nothing_lading_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(snapshot.GRACE_ENV, "0")
    store = lading.build_store(_tsv(tmp_path / "a.tsv", "a"), tmp_path / "s", progress=False).path
    write(store / "notes.txt", "the user's")
    write(tmp_path / "outside.txt", "precious")
    meta = _meta(store)
    units = ["notes.txt", "../outside.txt", str(tmp_path / "outside.txt"), "meta.json"]
    meta["history"] = [{"snapshot": "snap-x", "replaced_at": 0, "units": units}]
    _save(store, meta)
    lading.build_store(_tsv(tmp_path / "b.tsv", "b"), store, progress=False)  # commit + sweep
    assert (store / "notes.txt").read_text() == "the user's"
    assert (tmp_path / "outside.txt").read_text() == "precious"
    assert lading.open_store(store)["d1"] == "b 1"


@pytest.mark.parametrize(
    "field, value",
    [("tokens", ">u2"), ("tokens", "<i2"), ("tokens", "|u1"), ("text", "<u2"), ("ids", "S8")],
)
def test_a_column_dtype_other_than_the_build_wrote_is_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    src = write(
        tmp_path / "d.jsonl", "".join(f'{{"id": "d{i}", "text": "alpha beta"}}\n' for i in range(4))
    )
    tok = word_tokenizer(["alpha", "beta"], tmp_path / "t.json")
    store = lading.build_store(src, tmp_path / "s", tokenizer=str(tok), progress=False).path
    meta = _meta(store)
    meta["dtypes"][field] = value
    _save(store, meta)
    # the old code read '>u2' tokens as [512, 768] instead of [2, 3], silently
    with pytest.raises(StoreFormatError, match=rf"dtypes\.{field} = '{re.escape(value)}'"):
        lading.open_store(store).tokens("d1")


def test_a_commit_refuses_a_file_reached_through_a_symlink_out(tmp_path: Path) -> None:
    """The commit checks every file it lists once for symlinks on its way (one look a
    directory): a build folder that became a link to somewhere else is refused, naming it,
    and nothing is committed; a plain layout commits."""
    from lading.disk.commit import commit

    root, outside = tmp_path / "store", tmp_path / "elsewhere"
    (root / "build-1" / "part-0").mkdir(parents=True)
    outside.mkdir()
    for folder in (root / "build-1" / "part-0", outside):
        (folder / "tokens.bin").write_bytes(b"\1" * 100)
    files = {"build-1/part-0/tokens.bin": {"size": 100}}
    manifest = {"format": "lading.tokens", "snapshot": "snap-1", "files": files}
    commit(root, json.loads(json.dumps(manifest)), None)
    assert json.loads((root / "meta.json").read_text())["snapshot"] == "snap-1"

    shutil.rmtree(root / "build-1" / "part-0")
    os.symlink(outside, root / "build-1" / "part-0")
    bad = {**manifest, "snapshot": "snap-2"}
    with pytest.raises(StoreFormatError, match="points outside the store"):
        commit(root, json.loads(json.dumps(bad)), None)
    assert json.loads((root / "meta.json").read_text())["snapshot"] == "snap-1"
