"""Building in parallel: any shard count gives the store a one-process build gives, by content.

Shards are written by ``lading build SRC DEST --shard i/N`` (here through the CLI's ``main``,
in-process) or ``build_shard(..., (i, n))``, then committed by ``lading merge DEST``.
Compared with the one-process build of the same inputs: ``ids()`` order, texts, fields and
token ids. The runs under torchrun (gloo) and with a worker killed mid-shard are at the end,
marked slow.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lading
from conftest import word_tokenizer, write
from lading.cli import main
from lading.errors import StoreFormatError

WORDS = [f"w{i}" for i in range(50)]


def jsonl(path: Path, first: int, n: int, seed: int = 0) -> Path:
    """``n`` documents ``d<first>..``: words drawn at ``seed``, a title on every third."""
    rng = np.random.default_rng(seed + first)
    lines = []
    for i in range(first, first + n):
        doc = {"id": f"d{i}", "text": " ".join(rng.choice(WORDS, int(rng.integers(1, 30))))}
        if i % 3 == 0:
            doc["title"] = f"title {i}"
        lines.append(json.dumps(doc))
    return write(path, "\n".join(lines) + "\n")


def same_content(a: lading.PackedStore, b: lading.PackedStore) -> None:
    """``a`` and ``b`` hold the same documents in the same order, fields and tokens too."""
    ids = a.ids()
    assert b.ids() == ids and len(a) == len(b)
    assert b.get_many(ids[::-1]) == a.get_many(ids[::-1])
    assert b.texts_range(0, len(b)) == a.texts_range(0, len(a))
    assert b.fields == a.fields
    for name in a.fields:
        assert [b.field(i, name) for i in ids] == [a.field(i, name) for i in ids]
    assert b.find_rows(ids[5:40:3]).tolist() == a.find_rows(ids[5:40:3]).tolist()
    assert b.get_many_bytes(ids[:9]) == a.get_many_bytes(ids[:9])
    assert a.has_tokens == b.has_tokens
    if a.has_tokens:
        assert [t.tolist() for t in b.tokens_many(ids)] == [t.tolist() for t in a.tokens_many(ids)]
        for x, y in zip(a.token_arrays(), b.token_arrays()):
            assert np.array_equal(x, y)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_any_shard_count_by_cli_equals_one_process(tmp_path: Path, n: int) -> None:
    pytest.importorskip("tokenizers")
    src = jsonl(tmp_path / "c.jsonl", 0, 600)
    tok = word_tokenizer(WORDS, tmp_path / "tok.json")
    one = lading.build_store(src, tmp_path / "one", tokenizer=tok, progress=False)
    dest = tmp_path / "sharded"
    for i in reversed(range(n)):  # any order
        args = ["build", str(src), str(dest), "--shard", f"{i}/{n}", "--tokenizer", str(tok)]
        assert main([*args, "--quiet"]) == 0
    assert main(["merge", str(dest)]) == 0
    store = lading.open_store(dest)
    assert len(store.meta["shards"]) == n and store.meta["count"] == 600
    assert [s["rows"] for s in store.meta["shards"]] != [0] * n
    same_content(one, store)
    assert lading.stores.verify_store(dest) == []


def test_several_files_by_list_folder_or_glob(tmp_path: Path) -> None:
    """Files dealt to shards in order: plain ones cut at lines, compressed ones whole."""
    folder = tmp_path / "corpus"
    jsonl(folder / "a.jsonl", 0, 200)
    gz = jsonl(tmp_path / "b.jsonl", 200, 150)
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(gz.read_bytes()))
    jsonl(folder / "c.jsonl", 350, 250)
    files = sorted(folder.iterdir())
    one = lading.build_store(files, tmp_path / "one", progress=False)
    assert one.ids()[:2] == ["d0", "d1"] and one.ids()[-1] == "d599" and len(one) == 600
    same_content(one, lading.build_store(folder, tmp_path / "by-folder", progress=False))
    for n in (2, 3):
        dest = tmp_path / f"n{n}"
        for i in range(n):
            lading.build_shard(str(folder / "*.jsonl*"), dest, (i, n), progress=False)
        same_content(one, lading.merge_store(dest))
    assert "b.jsonl.gz" in json.dumps(lading.open_store(tmp_path / "n3").meta["shards"])


def test_a_source_whose_name_holds_glob_characters_is_that_file(tmp_path: Path) -> None:
    """``data [v1].jsonl`` that exists is read, not taken for a pattern: one read ``data
    v.jsonl`` beside it instead (another file's records, silently) or, with none such, was
    refused as matching no file; so was a folder ``corpus [2024]``."""
    named = jsonl(tmp_path / "data [v1].jsonl", 0, 30)
    jsonl(tmp_path / "data v.jsonl", 500, 5)  # what the pattern [v1] matches
    folder = tmp_path / "corpus [2024]"
    jsonl(folder / "a.jsonl", 0, 30)
    for source in (named, str(named), folder):
        one = lading.build_store(source, tmp_path / f"one-{time.monotonic_ns()}", progress=False)
        assert len(one) == 30 and one.ids()[0] == "d0", source
        dest = tmp_path / f"n-{time.monotonic_ns()}"
        for i in range(2):
            lading.build_shard(source, dest, (i, 2), progress=False)
        same_content(one, lading.merge_store(dest))
    with pytest.raises(FileNotFoundError, match="no file matches"):
        lading.build_store(str(tmp_path / "nothing*.jsonl"), tmp_path / "x", progress=False)


def test_an_empty_list_of_sources_is_refused_as_a_glob_matching_nothing(tmp_path: Path) -> None:
    """``build_store(glob.glob(...), dest)`` whose pattern matched nothing passes ``[]``: that
    was a bare ``IndexError`` (the first reader of none). Refused clearly, nothing written."""
    calls = {
        "build_store": lambda: lading.build_store([], tmp_path / "s", progress=False),
        "build_shard": lambda: lading.build_shard((), tmp_path / "t", (0, 1), progress=False),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=r"empty list of source files.*at least one"):
            call()
        assert sorted(p.name for p in tmp_path.iterdir()) == [], name


def test_a_beir_folder_named_by_format_is_built_in_shards(tmp_path: Path) -> None:
    """``format="beir"`` (as ``lading build --format beir``) deals the folder's corpus.jsonl
    out at line starts as the detected format does (it was refused: "1 input file(s) that
    cannot all be split", as if it were compressed)."""
    folder = tmp_path / "beir"
    lines = [
        json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": f"text {i}", "id": f"x{i}"})
        for i in range(40)
    ]
    write(folder / "corpus.jsonl", "\n".join(lines) + "\n")
    one = lading.build_store(folder, tmp_path / "one", format="beir", progress=False)
    assert one.ids()[:2] == ["d0", "d1"]  # BEIR's ids are "_id", not "id"
    for n in (1, 3):
        dest = tmp_path / f"n{n}"
        reports = [
            lading.build_shard(folder, dest, (i, n), format="beir", progress=False)
            for i in range(n)
        ]
        assert all(r.rows > 0 for r in reports)
        same_content(one, lading.merge_store(dest))


def test_a_duplicate_id_across_shards_names_both(tmp_path: Path) -> None:
    src = write(
        tmp_path / "c.tsv", "".join(f"d{i}\ttext {i}\n" for i in range(100)) + "d7\tagain\n"
    )
    for i in range(2):
        lading.build_shard(src, tmp_path / "s", (i, 2), progress=False)
    with pytest.raises(StoreFormatError, match=r"duplicate id 'd7' in shard 0 .* and shard 1 "):
        lading.merge_store(tmp_path / "s")


@pytest.mark.parametrize("keep", ["first", "last"])
def test_duplicates_first_or_last_across_shards_as_one_process(tmp_path: Path, keep: str) -> None:
    """A duplicate across shards is kept as a one-process build keeps it: the earliest row in
    source order (``first``) or the latest (``last``); one inside a shard too, and fields."""
    lines = [f"d{i}\ttext {i}\tt{i}\n" for i in range(100)]
    lines[3] = "d7\tearly\tte\n"  # d7 three times: shard 0 twice (rows 3, 7), shard 1 once
    lines += ["d7\tagain\tta\n", "d90\tlate\ttl\n", "d91\tlater\ttm\n", "d91\tlast\ttn\n"]
    src = write(tmp_path / "c.tsv", "".join(lines))
    parse = lading.ParseOptions(columns=["id", "text", "title"])
    one = lading.build_store(src, tmp_path / "one", duplicates=keep, parse=parse, progress=False)
    dest = tmp_path / "s"
    for i in range(2):
        lading.build_shard(src, dest, (i, 2), duplicates=keep, parse=parse, progress=False)
    store = lading.merge_store(dest)
    assert len(store.meta["shards"]) == 2 and len(one) == 99
    assert one["d7"] == ("early" if keep == "first" else "again")
    assert one["d90"] == ("text 90" if keep == "first" else "late")
    same_content(one, store)
    assert store.meta["build"]["duplicates_dropped"] == one.meta["build"]["duplicates_dropped"]
    assert lading.stores.verify_store(dest) == []
    again = lading.open_store(dest)
    assert again.ids() == one.ids() and again.get_many(["d7", "d91"]) == one.get_many(["d7", "d91"])


def test_lading_merge_says_what_duplicates_it_dropped_as_a_build_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--duplicates last`` with a duplicate across shards: the one-process build prints
    "dropped 1 duplicate id(s), kept the last"; the merge printed the skipped count only (a
    review's find: the count was in ``lading inspect``, the two builds reported otherwise)."""
    src = write(tmp_path / "c.tsv", "".join(f"d{i}\ttext {i}\n" for i in range(40)) + "d3\tx\n")
    assert main(["build", str(src), str(tmp_path / "one"), "--duplicates", "last", "--quiet"]) == 0
    built = [line for line in capsys.readouterr().out.splitlines() if "duplicate" in line]
    for i in range(2):
        shard = ["build", str(src), str(tmp_path / "s"), "--shard", f"{i}/2", "--quiet"]
        assert main([*shard, "--duplicates", "last"]) == 0
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "s")]) == 0
    merged = [line for line in capsys.readouterr().out.splitlines() if "duplicate" in line]
    assert built == merged == ["dropped 1 duplicate id(s), kept the last"], (built, merged)


@pytest.mark.parametrize("keep", ["first", "last"])
def test_a_shard_that_loses_every_row_to_the_merge_dedup_is_merged(
    tmp_path: Path, keep: str
) -> None:
    """Shard 1 holds only an id shard 0 holds too: under ``first`` its copy of the shard's kept
    rows has none (its id keys an empty table, which crashed writing it); the merge equals
    the one-process build."""
    a = write(tmp_path / "a.tsv", "doc-a\tfirst a\ndoc-b\tb\n")
    b = write(tmp_path / "b.tsv", "doc-a\tsecond a\n")
    one = lading.build_store([a, b], tmp_path / "one", duplicates=keep, progress=False)
    dest = tmp_path / "s"
    for i in range(2):
        lading.build_shard([a, b], dest, (i, 2), duplicates=keep, progress=False)
    store = lading.merge_store(dest)
    assert one["doc-a"] == ("first a" if keep == "first" else "second a")
    same_content(one, store)
    assert store.meta["build"]["duplicates_dropped"] == one.meta["build"]["duplicates_dropped"]
    assert lading.stores.verify_store(dest) == []
    assert lading.open_store(dest).get_many(["doc-b", "doc-a"]) == one.get_many(["doc-b", "doc-a"])


def test_missing_shards_are_named_and_a_rerun_builds_only_those(tmp_path: Path) -> None:
    src = jsonl(tmp_path / "c.jsonl", 0, 300)
    dest = tmp_path / "s"
    first = lading.build_shard(src, dest, (1, 3), progress=False)
    assert not first.reused and first.rows > 0
    with pytest.raises(
        StoreFormatError, match=r"1 of its 3 shards; missing 0, 2.*--shard I/3` for I in 0, 2"
    ):
        lading.merge_store(dest)
    assert lading.build_shard(src, dest, (1, 3), progress=False).reused
    for i in (0, 2):
        lading.build_shard(src, dest, (i, 3), progress=False)
    store = lading.merge_store(dest)
    assert lading.merge_store(dest).snapshot == store.snapshot  # merged once
    same_content(lading.build_store(src, tmp_path / "one", progress=False), store)


def test_a_shard_of_no_rows_and_a_field_only_some_shards_have(tmp_path: Path) -> None:
    """Lines longer than a shard's range leave that shard empty; a field seen only in one
    shard is empty elsewhere, as in a one-process build."""
    lines = [json.dumps({"id": "a", "text": "x" * 5000}), json.dumps({"id": "b", "text": "y"})]
    lines.append(json.dumps({"id": "c", "text": "z", "title": "only here"}))
    src = write(tmp_path / "c.jsonl", "\n".join(lines) + "\n")
    for i in range(4):
        lading.build_shard(src, tmp_path / "s", (i, 4), progress=False)
    store = lading.merge_store(tmp_path / "s")
    assert 0 in [s["rows"] for s in store.meta["shards"]]
    same_content(lading.build_store(src, tmp_path / "one", progress=False), store)
    assert store.field("c", "title") == "only here" and store.field("a", "title") == ""


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_bom_opening_a_shard_mid_file_is_read_as_one_process_reads_it(
    tmp_path: Path, n: int
) -> None:
    """``cat a.tsv b.tsv`` where b.tsv starts with a BOM: the BOM is dropped at byte 0 of the
    file only, so the id (TSV) and the refusal (JSONL) do not depend on where shards cut (at
    2 and 4 shards the BOM's line opens a shard's range)."""
    tsv_lines = [f"d{i}\ttext {i}\n" for i in range(8)]
    tsv_lines[5] = "\ufeff" + tsv_lines[5]
    src = write(tmp_path / "c.tsv", "".join(tsv_lines))
    one = lading.build_store(src, tmp_path / "one", progress=False)
    assert one.ids()[5] == "\ufeffd5"
    for i in range(n):
        lading.build_shard(src, tmp_path / "s", (i, n), progress=False)
    same_content(one, lading.merge_store(tmp_path / "s"))
    jsonl_lines = [json.dumps({"id": f"d{i}", "text": f"text {i}"}) + "\n" for i in range(8)]
    jsonl_lines[5] = "\ufeff" + jsonl_lines[5]
    bad = write(tmp_path / "c.jsonl", "".join(jsonl_lines))
    with pytest.raises(lading.SourceError, match=r"line 6 of .*Unexpected UTF-8 BOM"):
        lading.build_store(bad, tmp_path / "one-jsonl", progress=False)
    with pytest.raises(lading.SourceError, match=r"line 6 of .*Unexpected UTF-8 BOM"):
        for i in range(n):
            lading.build_shard(bad, tmp_path / "sj", (i, n), progress=False)


def test_shards_refuse_what_they_cannot_split(tmp_path: Path) -> None:
    gz = write(tmp_path / "c.tsv.gz", gzip.compress(b"1\tx\n2\ty\n"))
    with pytest.raises(ValueError, match=r"shard 1 would read nothing.*at most 1 shards"):
        lading.build_shard(gz, tmp_path / "s", (1, 2), progress=False)
    with pytest.raises(ValueError, match=r"i must be in \[0, 2\)"):
        lading.build_shard(gz, tmp_path / "s", (2, 2), progress=False)
    with pytest.raises(SystemExit):
        main(["build", str(gz), str(tmp_path / "s"), "--shard", "2/2"])


def test_the_shard_count_a_refusal_advises_is_one_that_works(tmp_path: Path) -> None:
    """Three gzip files of nearly one size, the first a few bytes smaller: 4 shards were
    refused with "use at most 3", and 3 then with "use at most 2" (whole files go to the
    shard of their first byte, and fewer shards move the runs' bounds)."""
    folder = tmp_path / "c"
    for k, pad in enumerate((0, 5, 3)):
        rows = "".join(f"{k}-{i}\tword {i} {'x' * pad}\n" for i in range(200))
        write(folder / f"{k}.tsv.gz", gzip.compress(rows.encode(), mtime=0))
    with pytest.raises(ValueError, match=r"Use at most (\d+) shards") as refused:
        lading.build_shard(folder, tmp_path / "s", (0, 4), progress=False)
    most = int(re.search(r"at most (\d+) shards", str(refused.value)).group(1))  # type: ignore[union-attr]
    for i in range(most):
        lading.build_shard(folder, tmp_path / "s", (i, most), progress=False)
    same_content(
        lading.build_store(folder, tmp_path / "one", progress=False),
        lading.merge_store(tmp_path / "s"),
    )


def test_a_sharded_store_is_stale_when_an_input_changes(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    jsonl(folder / "a.jsonl", 0, 50)
    b = jsonl(folder / "b.jsonl", 50, 50)
    for i in range(2):
        lading.build_shard(folder, tmp_path / "s", (i, 2), progress=False)
    lading.merge_store(tmp_path / "s")
    jsonl(b, 50, 51)
    with pytest.warns(lading.StaleStoreWarning, match=r"b\.jsonl"):
        lading.open_store(tmp_path / "s")


def test_build_store_returns_a_store_and_points_a_shard_to_build_shard(tmp_path: Path) -> None:
    src = jsonl(tmp_path / "c.jsonl", 0, 30)
    first_of_two: Any = (0, 2)  # not a shard build_store takes (a type checker says so too)
    with pytest.raises(ValueError, match=r"lading\.build_shard\(source, dest, \(0, 2\)\)"):
        lading.build_store(src, tmp_path / "s", shard=first_of_two, progress=False)
    assert not (tmp_path / "s").exists()  # refused before anything was written
    # without a process group, shard="auto" is a one-process build: a store, not a report
    store = lading.build_store(src, tmp_path / "s", shard="auto", progress=False)
    assert isinstance(store, lading.PackedStore) and len(store) == 30


def _auto(rank: int, world: int, src: str, dest: str) -> dict[str, object]:
    store = lading.build_store(src, dest, shard="auto", progress=False)
    return {"snapshot": store.snapshot, "shards": len(store.meta["shards"]), "ids": store.ids()}


@pytest.mark.slow
def test_under_torchrun_every_rank_builds_a_shard_and_rank_0_merges(tmp_path: Path) -> None:
    from distributed import run_processes

    src = jsonl(tmp_path / "c.jsonl", 0, 900)
    one = lading.build_store(src, tmp_path / "one", progress=False)
    results = run_processes(_auto, 3, str(src), str(tmp_path / "s"))
    assert len({r["snapshot"] for r in results}) == 1
    assert {r["shards"] for r in results} == {3}
    assert all(r["ids"] == one.ids() for r in results)
    same_content(one, lading.open_store(tmp_path / "s"))


def _auto_skip(rank: int, world: int, src: str, dest: str) -> list[str]:
    import warnings

    from lading.errors import SkippedRecordsWarning

    said = []
    for _ in range(2):  # a build, then a rerun that commits nothing new
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lading.build_store(src, dest, shard="auto", on_error="skip", progress=False)
        said.append(
            [
                f"{w.message} @{Path(w.filename).name}"  # (the line a user's log points at)
                for w in caught
                if issubclass(w.category, SkippedRecordsWarning)
            ]
        )
    return said


@pytest.mark.slow
def test_under_torchrun_rank_0_says_what_every_shard_skipped(tmp_path: Path) -> None:
    """A malformed line in shard 1 of 2 under ``on_error="skip"``: its rank warned of its own
    shard, and rank 0 (whose log is the one read) returned a store with ``skipped = 1`` and
    said nothing, where a one-process build warns. Rank 0 now warns of the whole store's skips
    (a rerun that commits nothing new says nothing, as a one-process rerun)."""
    from distributed import run_processes

    src = jsonl(tmp_path / "c.jsonl", 0, 200)
    lines = src.read_text().splitlines(keepends=True)
    lines[180] = '{"id": "bad", oops\n'
    src.write_text("".join(lines))
    said = run_processes(_auto_skip, 2, str(src), str(tmp_path / "s"))
    assert lading.open_store(tmp_path / "s").meta["build"]["skipped"] == 1
    first, rerun = said[0]
    assert any("skipped 1 malformed record(s)" in m and "line 181" in m for m in first), said
    assert all(m.endswith(f"@{Path(__file__).name}") for m in first), said
    assert rerun == [], said
    assert any("shard 1/2" in m for m in said[1][0]), said  # the shard's own rank, as before


@pytest.mark.slow
def test_a_worker_killed_mid_shard_commits_nothing_and_a_rerun_completes(tmp_path: Path) -> None:
    # killed as soon as its scratch folder appears: this shard goes from that folder to its
    # rename in 0.29-0.31 s on an idle machine, too near the 0.2 s this test once waited
    src = jsonl(tmp_path / "c.jsonl", 0, 200_000)
    dest = tmp_path / "s"
    build = [sys.executable, "-m", "lading", "build", str(src), str(dest), "--quiet", "--shard"]
    assert subprocess.run([*build, "1/2"], capture_output=True).returncode == 0
    proc = subprocess.Popen([*build, "0/2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(dest.glob("build-*/shard-00000-of-00002.tmp-*")):
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    assert list(dest.glob("build-*/shard-00000-of-00002.tmp-*")), "the kill missed the shard"
    with pytest.raises(StoreFormatError, match="missing 0"):
        lading.merge_store(dest)
    assert not (dest / "meta.json").exists()
    assert subprocess.run([*build, "0/2"], capture_output=True).returncode == 0
    assert not list(dest.glob("build-*/*.tmp-*"))  # the dead worker's temp went
    same_content(
        lading.build_store(src, tmp_path / "one", progress=False), lading.merge_store(dest)
    )


def test_a_shard_that_skips_records_says_how_many_as_a_one_process_build_does(
    tmp_path: Path,
) -> None:
    """on_error="skip": the one-process build warns with the count; shards were silent (the
    count only in the merged manifest)."""
    from lading.errors import SkippedRecordsWarning

    src = tmp_path / "a.jsonl"
    src.write_text('{"id": "1", "text": "a"}\n{"id": "2", oops\n{"id": "3", "text": "c"}\n')
    with pytest.warns(SkippedRecordsWarning, match=r"skipped 1 malformed record\(s\) of shard"):
        for i in range(2):
            lading.build_shard(src, tmp_path / "s", (i, 2), on_error="skip", progress=False)
    assert lading.merge_store(tmp_path / "s").meta["build"]["skipped"] == 1


def test_shard_and_merge_lines_say_how_many_records_were_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading build --shard I/N --on-error skip` and `lading merge` said nothing of the records
    skipped (the CLI hid the shard's warning, its line had no count): each shard's line, a
    rerun's and the merge's say the count and the first, as a one-process build does."""
    src = tmp_path / "a.jsonl"
    lines = [f'{{"id": "{i}", "text": "doc {i}"}}\n' for i in range(10)]
    for i in (2, 5, 8):
        lines[i] = f'{{"id": "{i}", "text": broken\n'
    src.write_text("".join(lines))
    first = f"skipped 1 malformed record(s); first: line 3 of {src}: invalid JSON"
    said = []
    for shard in ("0/2", "1/2", "0/2"):  # the last a rerun: already built, still said
        build = ["build", str(src), str(tmp_path / "s"), "--on-error", "skip", "--quiet"]
        assert main([*build, "--shard", shard]) == 0
        said.append(capsys.readouterr())
    assert [s.err for s in said] == ["", "", ""]  # no warning through Python's machinery
    assert said[0].out.splitlines()[1].startswith(first) and "4 documents" in said[0].out
    second = f"skipped 2 malformed record(s); first: line 6 of {src}"
    assert said[1].out.splitlines()[1].startswith(second) and "3 documents" in said[1].out
    assert said[2].out.splitlines()[1].startswith(first) and "already built" in said[2].out
    assert main(["merge", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "7 documents from 2 shard(s)" in out[0]
    assert out[1].startswith(f"skipped 3 malformed record(s); first: line 3 of {src}")
    report = lading.build_shard(src, tmp_path / "s", (1, 2), on_error="skip", progress=False)
    assert (report.skipped, report.skip_examples[1][:9]) == (2, "line 9 of")


def test_input_files_of_different_formats_are_refused_by_every_shard(tmp_path: Path) -> None:
    """A folder of a TSV and a JSONL file, built in shards, is refused as a one-process build
    refuses it, by each shard (a shard holding files of one format built, and the merged
    store recorded the first file's format for rows parsed as the other)."""
    tsv = "".join(f"{i}\tdoc {i} from tsv\n" for i in range(20))
    jsonl = "".join(json.dumps({"id": f"j{i}", "text": f"doc {i}"}) + "\n" for i in range(20))
    write(tmp_path / "src" / "a.tsv", tsv)
    write(tmp_path / "src" / "b.jsonl", jsonl)
    with pytest.raises(ValueError, match="different formats"):
        lading.build_store(tmp_path / "src", tmp_path / "one", progress=False)
    for i in range(2):
        with pytest.raises(ValueError, match=r"different formats \(.*a\.tsv is tsv.*b\.jsonl"):
            lading.build_shard(tmp_path / "src", tmp_path / "m", (i, 2), progress=False)
    assert not list((tmp_path / "m").glob("build-*/shard-*/shard.json"))
