"""A token corpus built in shards: any shard count reads as the one-process build, bit for bit.

Shards are written by ``TokenCorpus.build_shard`` or ``lading lm build ... --shard i/N`` and
committed by ``TokenCorpus.merge`` / ``lading lm merge``; the merged corpus reads each shard's
``tokens.bin`` in place. Compared with the one-process build of the same inputs: documents,
offsets, and the batches of every LM mode (streams, windows, packed, with document masks).
Runs under torchrun (gloo) and with a worker killed mid-shard are at the end, marked slow.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import files_open_under, word_tokenizer, write
from lading.cli import main
from lading.errors import SkippedRecordsWarning, SourceError, StaleStoreWarning, StoreFormatError
from lading.lm import LanguageModelLoader, Packed, Streams, TokenCorpus, Windows
from lading.world import World

pytest.importorskip("tokenizers")
WORDS = [f"w{i}" for i in range(300)]
SEED = int(os.environ.get("LADING_TEST_SEED", "49"))


def texts(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, int(rng.integers(1, 60)))) for _ in range(n)]


def inputs(folder: Path, seed: int = SEED) -> Path:
    """A folder of a big JSONL (cut inside by shards), a small one and a plain text file
    (blank-line documents, whole to one shard), read in path order."""
    print(f"LADING_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    big = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts(rng, 700)))
    write(folder / "src" / "a.jsonl", big)
    write(folder / "src" / "b.txt", "\n\n".join(texts(rng, 60)) + "\n")
    small = "".join(
        json.dumps({"id": f"c{i}", "text": t}) + "\n" for i, t in enumerate(texts(rng, 40))
    )
    write(folder / "src" / "c.jsonl", small)
    word_tokenizer(WORDS, folder / "t.json")
    return folder / "src"


def digest(loader: LanguageModelLoader) -> str:
    h = hashlib.sha256()
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            for t in batch:
                h.update(str(t).encode() if isinstance(t, int) else np.asarray(t).tobytes())
    return h.hexdigest()


SEQUENCES = {
    "streams": Streams(7),
    "windows": Windows(16),
    "windows-boundaries": Windows(16, boundaries=True),
    "windows-stored": Windows(16, shuffle_documents=False),  # runs across parts' ends
    "packed": Packed(24),
    "packed-boundaries": Packed(seq_len=24, boundaries=True),
}


def same_reading(one: TokenCorpus, merged: TokenCorpus) -> None:
    """``merged`` holds ``one``'s tokens in ``one``'s document order, and every LM mode gives
    the same batches from both, bit for bit."""
    assert len(merged) == len(one) and merged.n_tokens == one.n_tokens
    assert merged.dtype == one.dtype and merged.eos_id == one.eos_id
    assert np.array_equal(np.asarray(merged.offsets), np.asarray(one.offsets))
    for i in range(len(one)):
        assert np.array_equal(merged.document(i), one.document(i)), f"document {i}"
    for x, y in zip(one.token_arrays(), merged.token_arrays()):
        assert np.array_equal(x, y)
    assert merged.tokenizer().to_str() == one.tokenizer().to_str()
    for name, sequence in SEQUENCES.items():
        a = LanguageModelLoader(one, 3, sequence, seed=5, world=World(1, 2))
        b = LanguageModelLoader(merged, 3, sequence, seed=5, world=World(1, 2))
        assert digest(a) == digest(b), name


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_any_shard_count_reads_as_the_one_process_build(tmp_path: Path, n: int) -> None:
    src = inputs(tmp_path)
    one = TokenCorpus.build(src, tmp_path / "one", tmp_path / "t.json", progress=False)
    dest = tmp_path / "merged"
    for i in reversed(range(n)):  # any order
        report = TokenCorpus.build_shard(src, dest, (i, n), tmp_path / "t.json", progress=False)
        assert not report.reused
    merged = TokenCorpus.merge(dest)
    assert len(merged.meta["parts"]) == n and merged.meta["version"] == 3
    same_reading(one, merged)
    reopened = TokenCorpus.open(dest)
    same_reading(one, reopened)
    # the merge hands back the manifest it committed, not read back: the same, key for key
    # and in the same order, as a reader parses it from meta.json
    assert json.dumps(merged.meta) == json.dumps(reopened.meta)
    assert (merged.snapshot, merged.stale) == (reopened.snapshot, reopened.stale)
    again = TokenCorpus.merge(dest)  # a retried merge commits nothing: what is there, opened
    assert json.dumps(again.meta) == json.dumps(reopened.meta)
    from lading.lm.corpus import verify_corpus

    assert verify_corpus(dest) == []


def test_the_merge_copies_no_token_file(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    dest = tmp_path / "merged"
    for i in range(3):
        TokenCorpus.build_shard(src, dest, (i, 3), tmp_path / "t.json", progress=False)
    shard_bytes = sum(p.stat().st_size for p in dest.glob("build-*/shard-*/*") if p.is_file())
    merged = TokenCorpus.merge(dest)
    written = {p.name: p.stat().st_size for p in (dest / merged.snapshot).iterdir()}
    assert set(written) == {"manifest.json"}, written  # no token, no offset is copied
    # the manifest names files and counts, a few lines a shard: nothing grows with documents
    assert written["manifest.json"] < 2048 * 3 < 0.1 * shard_bytes
    for name in ("tokens.bin", "tokens.off"):
        listed = [p for p in merged.meta["files"] if p.endswith(name)]
        assert len(listed) == 3 and all(p.startswith("build-") for p in listed)
    # one tokenizer listed, the one the corpus reads (the other shards' copies never are)
    assert [p for p in merged.meta["files"] if p.endswith("tokenizer.json")] == [
        merged.meta["tokenizer_file"]
    ]


def test_the_cli_builds_shards_and_merges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = inputs(tmp_path)
    dest = tmp_path / "cli"
    tok = str(tmp_path / "t.json")
    for i in range(2):
        args = ["lm", "build", str(src), str(dest), "--tokenizer", tok, "--shard", f"{i}/2"]
        assert main([*args, "--quiet"]) == 0
    assert "lading lm merge" in capsys.readouterr().out
    assert main(["lm", "merge", str(dest)]) == 0
    assert "from 2 shard(s)" in capsys.readouterr().out
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    same_reading(one, TokenCorpus.open(dest))


def test_a_glob_builds_as_the_files_it_matches_in_shards_and_in_one_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading lm build 'src/*.jsonl' DEST --shard i/N` (a Slurm array's line, as `lading
    build` takes it) said "src/*.jsonl: no such file or folder": a token corpus took no glob.
    It reads the files the pattern matches, sorted by path, in shards and in one process
    alike, and is the same build as that list of files."""
    src = inputs(tmp_path)
    tok = str(tmp_path / "t.json")
    pattern = str(src / "*.jsonl")
    for i in range(2):
        args = ["lm", "build", pattern, str(tmp_path / "m"), "--tokenizer", tok, "--quiet"]
        assert main([*args, "--shard", f"{i}/2"]) == 0
    assert main(["lm", "merge", str(tmp_path / "m")]) == 0
    assert main(["lm", "build", pattern, str(tmp_path / "g"), "--tokenizer", tok, "--quiet"]) == 0
    capsys.readouterr()
    listed = [src / "a.jsonl", src / "c.jsonl"]  # b.txt is no match
    one = TokenCorpus.build(listed, tmp_path / "one", tok, progress=False)
    same_reading(one, TokenCorpus.open(tmp_path / "m"))
    same_reading(one, TokenCorpus.open(tmp_path / "g"))
    assert TokenCorpus.build(pattern, tmp_path / "g", tok).snapshot == (  # the same build:
        TokenCorpus.open(tmp_path / "g").snapshot  # reused, not made again
    )
    assert main(["lm", "tokenizer", pattern, str(tmp_path / "t2.json"), "--vocab-size", "300"]) == 0
    assert (
        main(["lm", "build", str(src / "*.parquet"), str(tmp_path / "x"), "--tokenizer", tok]) == 2
    )
    assert "no file matches" in capsys.readouterr().err
    assert (
        main(["lm", "build", pattern, str(tmp_path / "x"), "--tokenizer", tok, "--split", "line"])
        == 2
    )
    assert "is JSON records" in capsys.readouterr().err  # the flag refused, as for a folder


def test_a_list_of_files_holding_no_document_is_refused_naming_them(tmp_path: Path) -> None:
    """A list of empty files raised TypeError (os.fspath of the list) building its message."""
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    empty = [write(tmp_path / "e1.txt", ""), write(tmp_path / "e2.txt", "")]
    with pytest.raises(SourceError, match=r"e1.txt \(\+1 listed\): holds no documents"):
        TokenCorpus.build(empty, tmp_path / "c", tok, progress=False)


def test_an_empty_list_of_sources_is_refused_and_no_empty_shard_written(tmp_path: Path) -> None:
    """``TokenCorpus.build_shard([], ...)`` (a caller's glob that matched nothing) wrote a shard
    of 0 documents and told to merge it; refused as a store's build refuses it."""
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    with pytest.raises(ValueError, match=r"empty list of source files.*at least one"):
        TokenCorpus.build_shard([], tmp_path / "c", (0, 1), tok, progress=False)
    assert not (tmp_path / "c").exists()
    with pytest.raises(ValueError, match=r"empty list of source files.*at least one"):
        TokenCorpus.build([], tmp_path / "c", tok, progress=False)
    assert not (tmp_path / "c").exists()


def test_a_list_of_files_builds_in_the_order_given_and_is_rebuilt_when_one_changes(
    tmp_path: Path,
) -> None:
    """``TokenCorpus.build([b, a], ...)`` reads the files in the order given, as a store's
    build and ``build_shard`` do (it was refused: one source only); built again it is reused,
    and a listed file edited since makes it stale and rebuilt. A folder in the list, or a
    file that is not there, is refused naming it."""
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    a = write(tmp_path / "in" / "a.txt", "w1 w2\n\nw3\n")
    b = write(tmp_path / "in" / "b.jsonl", json.dumps({"text": "w4 w5"}) + "\n")
    built = TokenCorpus.build([b, a], tmp_path / "c", tok, progress=False)
    ids = [WORDS.index(w) + 2 for w in ("w4", "w5", "w1", "w2", "w3")]
    assert [built.document(i).tolist() for i in range(3)] == [
        [*ids[:2], 0],
        [*ids[2:4], 0],
        [ids[4], 0],
    ]
    again = TokenCorpus.build([b, a], tmp_path / "c", tok, progress=False)
    assert again.snapshot == built.snapshot and not again.stale
    write(a, "w1\n")
    with pytest.warns(StaleStoreWarning, match=r"a\.txt is now 3 bytes"):
        assert TokenCorpus.open(tmp_path / "c").stale
    rebuilt = TokenCorpus.build([b, a], tmp_path / "c", tok, progress=False)
    assert rebuilt.snapshot != built.snapshot and len(rebuilt) == 2
    with pytest.raises(ValueError, match=r"in the list of sources is a folder"):
        TokenCorpus.build([b, tmp_path / "in"], tmp_path / "d", tok, progress=False)
    with pytest.raises(FileNotFoundError, match=r"nope\.txt \(in the list of sources\)"):
        TokenCorpus.build([b, tmp_path / "nope.txt"], tmp_path / "d", tok, progress=False)
    assert not (tmp_path / "d").exists()


def test_missing_shards_are_named_and_a_rerun_writes_only_those(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    TokenCorpus.build_shard(src, dest, (1, 3), tok, progress=False)
    with pytest.raises(StoreFormatError, match=r"missing 0, 2.*lading lm build SOURCE"):
        TokenCorpus.merge(dest)
    assert not (dest / "meta.json").exists()
    built = next(dest.glob("build-*/shard-00001-of-00003"))
    before = built.stat().st_mtime_ns
    again = [TokenCorpus.build_shard(src, dest, (i, 3), tok, progress=False) for i in range(3)]
    assert [r.reused for r in again] == [False, True, False]
    assert built.stat().st_mtime_ns == before
    merged = TokenCorpus.merge(dest)
    assert TokenCorpus.merge(dest).snapshot == merged.snapshot  # merged once: opened as it is


def test_a_shard_of_another_tokenizer_is_refused_naming_both(tmp_path: Path) -> None:
    """The tokenizer is one of a build's options: shards of two tokenizers are two builds,
    neither whole, named with their tokenizers (under one build id: tests/lm/
    test_lm_shard_reruns.py)."""
    src = inputs(tmp_path)
    dest = tmp_path / "m"
    other = word_tokenizer([*WORDS, "extra"], tmp_path / "other.json")
    first = TokenCorpus.build_shard(src, dest, (0, 2), tmp_path / "t.json", progress=False)
    second = TokenCorpus.build_shard(src, dest, (1, 2), other, progress=False)
    assert first.build_id != second.build_id
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.merge(dest)
    message = str(caught.value)
    assert first.build_id in message and second.build_id in message
    assert re.search(r"tokenizer='[0-9a-f]{64}' against '[0-9a-f]{64}'", message), message
    assert not (dest / "meta.json").exists()


def test_a_shard_of_another_tokenizer_copied_in_is_refused_naming_both(tmp_path: Path) -> None:
    """A shard tokenized with another tokenizer under the build's id (copied in from another
    build, past the claim's check): the merge names it and a shard of the build's tokenizer,
    with the two tokenizers (the options check ran first and named one shard and the build)."""
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    other = word_tokenizer([*WORDS, "extra"], tmp_path / "other.json")
    TokenCorpus.build_shard(src, dest, (0, 2), tok, build_id="build-x", progress=False)
    TokenCorpus.build_shard(src, tmp_path / "o", (1, 2), other, build_id="build-x", progress=False)
    shard = "build-x/shard-00001-of-00002"
    shutil.copytree(tmp_path / "o" / shard, dest / shard)
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.merge(dest)
    message = str(caught.value)
    assert str(dest / shard) in message and "shard-00000-of-00002" in message, message
    assert re.search(r"tokenizer='[0-9a-f]{64}' against '[0-9a-f]{64}'", message), message
    assert "tokenized otherwise" in message and not (dest / "meta.json").exists()


def test_a_shard_of_other_inputs_is_refused_naming_both(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    TokenCorpus.build_shard(src, dest, (0, 2), tok, build_id="build-fixed", progress=False)
    write(src / "d.txt", "a new file\n")  # the input folder gained a file between two tasks
    with pytest.raises(StoreFormatError, match=r"reads other inputs.*d\.txt"):
        TokenCorpus.build_shard(src, dest, (1, 2), tok, build_id="build-fixed", progress=False)


def test_a_shard_of_another_single_file_is_refused_in_words_for_a_corpus(tmp_path: Path) -> None:
    """Shard 1 built from another file than shard 0 (one JSONL each): refused at the claim and,
    the shard copied in, at the merge, naming both files as another input given, not as "an
    input folder or glob that gained or lost a file", and a corpus, not a store."""
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    a, b = src / "a.jsonl", src / "c.jsonl"
    TokenCorpus.build_shard(a, dest, (0, 2), tok, build_id="build-y", progress=False)
    with pytest.raises(StoreFormatError) as claimed:
        TokenCorpus.build_shard(b, dest, (1, 2), tok, build_id="build-y", progress=False)
    other = tmp_path / "other"
    TokenCorpus.build_shard(b, other, (1, 2), tok, build_id="build-y", progress=False)
    shard = "build-y/shard-00001-of-00002"
    shutil.copytree(other / shard, dest / shard)
    with pytest.raises(StoreFormatError) as merged:
        TokenCorpus.merge(dest)
    for message in (str(claimed.value), str(merged.value)):
        assert "a.jsonl" in message and "c.jsonl" in message, message
        assert "folder or glob" not in message and "another input" in message, message
    assert "token corpus would mix" in str(merged.value) and "store" not in str(merged.value)


def test_a_shard_of_another_count_or_options_under_one_build_id_is_refused(
    tmp_path: Path,
) -> None:
    """Under one explicit build id, a worker told another N (or other options) is refused when
    it starts, naming both, not accepted to leave a merge that asks for a shard that exists."""
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    TokenCorpus.build_shard(src, dest, (0, 2), tok, build_id="build-job42", progress=False)
    with pytest.raises(StoreFormatError, match=r"shard 0 of 3 .*build-job42.* 2 shards"):
        TokenCorpus.build_shard(src, dest, (0, 3), tok, build_id="build-job42", progress=False)
    with pytest.raises(StoreFormatError, match=r"other options.*append_eos"):
        TokenCorpus.build_shard(
            src, dest, (1, 2), tok, build_id="build-job42", append_eos=False, progress=False
        )
    assert [p.name for p in (dest / "build-job42").glob("shard-*")] == ["shard-00000-of-00002"]


def test_partial_builds_of_other_options_or_counts_are_all_named_at_the_merge(
    tmp_path: Path,
) -> None:
    """Workers that disagree on options or N derive other build ids: the merge names every
    partial build, with its count and options, not only the last one sorted."""
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    TokenCorpus.build_shard(src, dest, (0, 2), tok, progress=False)
    TokenCorpus.build_shard(src, dest, (1, 2), tok, append_eos=False, progress=False)
    TokenCorpus.build_shard(src, dest, (1, 3), tok, progress=False)
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.merge(dest)
    message = str(caught.value)
    builds = sorted(p.name for p in dest.glob("build-*"))
    assert len(builds) == 3 and all(b in message for b in builds), message
    assert "1 of its 2" in message and "1 of its 3" in message and "append_eos" in message


def test_partial_builds_of_an_input_that_changed_between_tasks_say_so(tmp_path: Path) -> None:
    """An input touched between two shard tasks (re-copied, rsynced: the same bytes) makes two
    builds, neither whole: the merge said "workers given other options or another N" over two
    equal option dicts; it names the file whose identity changed."""
    src = inputs(tmp_path)
    dest, tok = tmp_path / "m", tmp_path / "t.json"
    TokenCorpus.build_shard(src, dest, (0, 2), tok, progress=False)
    stat = (src / "b.txt").stat()
    os.utime(src / "b.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    TokenCorpus.build_shard(src, dest, (1, 2), tok, progress=False)
    with pytest.raises(StoreFormatError) as caught:
        TokenCorpus.merge(dest)
    message = str(caught.value)
    assert "b.txt" in message and "changed" in message, message
    assert "other options or another N" not in message and "'append_eos'" not in message


def test_a_malformed_line_is_named_or_skipped(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    lines = (src / "a.jsonl").read_text().splitlines(keepends=True)
    lines[650] = '{"text": "w1 w2", oops\n'
    (src / "a.jsonl").write_text("".join(lines))
    tok = tmp_path / "t.json"
    with pytest.raises(SourceError, match=r"line 651 of .*a\.jsonl"):
        TokenCorpus.build_shard(src, tmp_path / "m", (1, 2), tok, progress=False)
    said = r"skipped 1 malformed record\(s\) of shard .*; first: line 651 of .*a\.jsonl: invalid"
    with pytest.warns(SkippedRecordsWarning, match=said):
        for i in range(2):  # the shard that skipped says so, as a one-process build does
            TokenCorpus.build_shard(
                src, tmp_path / "s", (i, 2), tok, on_error="skip", progress=False
            )
    merged = TokenCorpus.merge(tmp_path / "s")
    assert merged.meta["skipped"] == 1 and len(merged) == 700 + 60 + 40 - 1


def test_shard_and_merge_lines_say_how_many_records_were_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading lm build --shard I/N --on-error skip` and `lading lm merge` said nothing of the
    records skipped (a warning through Python's machinery at best): the line of the shard that
    skipped, of its rerun and of the merge say the count and the first."""
    src = inputs(tmp_path)
    lines = (src / "a.jsonl").read_text().splitlines(keepends=True)
    lines[650] = '{"text": "w1 w2", oops\n'
    (src / "a.jsonl").write_text("".join(lines))
    first = f"skipped 1 malformed record(s); first: line 651 of {src / 'a.jsonl'}: invalid JSON"
    build = ["lm", "build", str(src), str(tmp_path / "s"), "--tokenizer", str(tmp_path / "t.json")]
    said, _ = [], capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # printed, not warned of
        for shard in ("0/2", "1/2", "1/2"):  # the last a rerun: already built, still said
            assert main([*build, "--quiet", "--on-error", "skip", "--shard", shard]) == 0
            said.append(capsys.readouterr().out.splitlines())
    assert len(said[0]) == 1  # the first shard skipped nothing
    assert said[1][1].startswith(first) and said[2][1].startswith(first)
    assert "already built" in said[2][0]
    assert main(["lm", "merge", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "from 2 shard(s)" in out[0] and out[1].startswith(first)


def test_one_process_skips_as_the_shards_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``on_error="skip"`` in a one-process build (API and CLI without --shard; it was taken by
    shards only, and the CLI ignored it): the bad record counted and warned of, the corpus the
    same as the shards' merge; a clean rebuild with "raise" does not reuse it."""
    from lading.errors import SkippedRecordsWarning

    src = inputs(tmp_path)
    lines = (src / "a.jsonl").read_text().splitlines(keepends=True)
    lines[650] = '{"text": "w1 w2", oops\n'
    (src / "a.jsonl").write_text("".join(lines))
    tok = tmp_path / "t.json"
    first = f"line 651 of {src / 'a.jsonl'}: invalid JSON"  # (the store build's wording)
    with pytest.warns(SkippedRecordsWarning, match=rf"skipped 1 malformed .*; first: {first}"):
        one = TokenCorpus.build(src, tmp_path / "one", tok, on_error="skip", progress=False)
    assert one.meta["skipped"] == 1
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "s", (i, 2), tok, on_error="skip", progress=False)
    same_reading(one, TokenCorpus.merge(tmp_path / "s"))
    with pytest.raises(SourceError, match="line 651"):
        TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    cli = [str(src), str(tmp_path / "cli"), "--tokenizer", str(tok), "--quiet"]
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # printed as `lading build` prints it, not warned of
        assert main(["lm", "build", *cli, "--on-error", "skip"]) == 0
    assert TokenCorpus.open(tmp_path / "cli").meta["skipped"] == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{tmp_path / 'cli'}: 799 documents")  # not None
    assert out[1].startswith(f"skipped 1 malformed record(s); first: {first} (")


def test_a_lone_surrogate_escape_is_named_or_skipped(tmp_path: Path) -> None:
    """``"\\ud800"`` in a JSONL text: a malformed record named by file and line, or skipped
    and counted, by one process and by shards (the tokenizer raised a TypeError, named
    nowhere)."""
    src = inputs(tmp_path)
    lines = (src / "a.jsonl").read_text().splitlines(keepends=True)
    lines[650] = '{"text": "w1 \\ud800 w2"}\n'
    (src / "a.jsonl").write_text("".join(lines))
    tok = tmp_path / "t.json"
    with pytest.raises(SourceError, match=r"line 651 of .*a\.jsonl: a lone surrogate"):
        TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    with pytest.raises(SourceError, match=r"line 651 of .*a\.jsonl: a lone surrogate"):
        TokenCorpus.build_shard(src, tmp_path / "m", (1, 2), tok, progress=False)
    with pytest.warns(SkippedRecordsWarning, match="skipped 1 malformed"):
        one = TokenCorpus.build(src, tmp_path / "one", tok, on_error="skip", progress=False)
    with pytest.warns(SkippedRecordsWarning, match="skipped 1 malformed"):
        for i in range(2):
            TokenCorpus.build_shard(
                src, tmp_path / "s", (i, 2), tok, on_error="skip", progress=False
            )
    merged = TokenCorpus.merge(tmp_path / "s")
    assert one.meta["skipped"] == merged.meta["skipped"] == 1
    assert len(one) == len(merged) == 700 + 60 + 40 - 1


def test_jsonl_records_without_ids_make_a_corpus(tmp_path: Path) -> None:
    """``{"text": ...}`` a line, the usual LM record, has no id, and a token corpus keeps
    none: one process and shards build it, as the same records with ids (they were refused:
    "no id field", pointing at options neither build takes); a title that is no string is
    no error either (a corpus keeps no fields)."""
    rng = np.random.default_rng(SEED)
    docs = texts(rng, 300)
    word_tokenizer(WORDS, tmp_path / "t.json")
    tok = tmp_path / "t.json"
    bare = "".join(json.dumps({"text": t, "title": 7}) + "\n" for t in docs)
    named = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(docs))
    write(tmp_path / "bare" / "a.jsonl", bare)
    write(tmp_path / "named" / "a.jsonl", named)
    want = TokenCorpus.build(tmp_path / "named", tmp_path / "want", tok, progress=False)
    one = TokenCorpus.build(tmp_path / "bare", tmp_path / "one", tok, progress=False)
    same_reading(want, one)
    for i in range(3):
        TokenCorpus.build_shard(tmp_path / "bare", tmp_path / "s", (i, 3), tok, progress=False)
    same_reading(want, TokenCorpus.merge(tmp_path / "s"))


def test_a_text_field_of_another_name_is_named_by_text_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSONL whose text is under another key (The Stack's ``"content"``) builds with
    ``text_field=`` (``--text-field`` at the command line), one process and in shards, each
    document its text's words in order; without it the error names the keyword or flag that
    exists there (it advised a ``--text-field`` that ``lading lm build`` did not have, and
    ``parse=ParseOptions(...)``, which no LM build takes). Shards of another text field are
    another build."""
    docs = texts(np.random.default_rng(SEED), 50)
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    lines = "".join(json.dumps({"id": i, "content": t}) + "\n" for i, t in enumerate(docs))
    src = write(tmp_path / "code.jsonl", lines)
    want = [[WORDS.index(w) + 2 for w in t.split()] + [0] for t in docs]

    def read(corpus: TokenCorpus) -> list[list[int]]:
        return [corpus.document(i).tolist() for i in range(len(corpus))]

    with pytest.raises(SourceError, match=r"line 1 of .*code\.jsonl: no text field") as no:
        TokenCorpus.build(src, tmp_path / "no", tok, progress=False)
    assert "text_field=" in str(no.value) and "ParseOptions" not in str(no.value)
    one = TokenCorpus.build(src, tmp_path / "one", tok, text_field="content", progress=False)
    assert read(one) == want
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "s", (i, 2), tok, text_field="content")
    assert read(TokenCorpus.merge(tmp_path / "s")) == want
    with pytest.raises(SourceError, match="no text field"):  # not the shards above, reused
        TokenCorpus.build_shard(src, tmp_path / "s", (0, 2), tok, progress=False)
    cli = [str(src), str(tmp_path / "cli"), "--tokenizer", str(tok), "--quiet"]
    assert main(["lm", "build", *cli]) == 2
    said = capsys.readouterr().err
    assert said.rstrip().endswith(
        "no text field: expected one of ['text', 'contents', 'body']; name it: --text-field"
    )
    assert main(["lm", "build", *cli, "--text-field", "content"]) == 0
    assert read(TokenCorpus.open(tmp_path / "cli")) == want
    for i in range(2):
        shard = ["--shard", f"{i}/2", "--text-field", "content"]
        assert main(["lm", "build", str(src), str(tmp_path / "cs"), *cli[2:], *shard]) == 0
    assert main(["lm", "merge", str(tmp_path / "cs")]) == 0
    assert read(TokenCorpus.open(tmp_path / "cs")) == want


def test_a_text_field_no_file_would_use_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``text_field`` names a key of JSON records: with a plain-text file, a folder of them or
    a lading store it was ignored and the corpus built from texts the user did not name. It
    is refused before any tokenizing, one process, in shards and at the command line; a
    folder holding JSONL beside text files takes it."""
    import lading

    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    plain = write(tmp_path / "plain" / "a.txt", "alpha beta\n\ngamma\n")
    store = tmp_path / "store"
    lading.build_store(write(tmp_path / "d.tsv", "d1\talpha beta\n"), store, progress=False)
    for source, what in ((plain, "plain text"), (plain.parent, "plain text"), (store, "store")):
        with pytest.raises(ValueError, match=f"text_field='content'.*{what}.*drop text_field"):
            TokenCorpus.build(source, tmp_path / "x", tok, text_field="content", progress=False)
        with pytest.raises(ValueError, match=f"text_field='content'.*{what}"):
            TokenCorpus.build_shard(source, tmp_path / "xs", (0, 1), tok, text_field="content")
    assert not (tmp_path / "x").exists() and not (tmp_path / "xs" / "shard-00000").exists()
    cli = [str(plain), str(tmp_path / "cli"), "--tokenizer", str(tok), "--quiet"]
    assert main(["lm", "build", *cli, "--text-field", "content"]) == 2
    assert "--text-field" in capsys.readouterr().err
    write(tmp_path / "plain" / "b.jsonl", json.dumps({"content": "delta"}) + "\n")
    mixed = TokenCorpus.build(plain.parent, tmp_path / "m", tok, text_field="content")
    assert len(mixed) == 3


def test_a_build_that_fails_leaves_no_file_open(tmp_path: Path) -> None:
    """A malformed line stops a token corpus build, one process or a shard: the tokens'
    files are closed as the error is raised (they stayed open while it was held)."""
    src = inputs(tmp_path)
    lines = (src / "a.jsonl").read_text().splitlines(keepends=True)
    lines[650] = '{"text": "w1 w2", oops\n'
    (src / "a.jsonl").write_text("".join(lines))
    tok = tmp_path / "t.json"
    with pytest.raises(SourceError, match="line 651") as one:
        TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    assert files_open_under(tmp_path) == [] and one.value.line == 651
    with pytest.raises(SourceError, match="line 651") as shard:
        TokenCorpus.build_shard(src, tmp_path / "m", (1, 2), tok, progress=False)
    assert files_open_under(tmp_path) == [] and shard.value.line == 651


def test_a_malformed_line_of_a_compressed_file_is_named_or_skipped(tmp_path: Path) -> None:
    """A compressed JSONL goes to one shard whole (it cannot be cut at line starts); its bad
    line is named, or skipped and counted, as in a plain one (it raised under skip)."""
    import gzip

    src = inputs(tmp_path)
    lines = (src / "c.jsonl").read_text().splitlines(keepends=True)
    lines[7] = '{"text": "w1 w2", oops\n'
    (src / "c.jsonl").unlink()
    with gzip.open(src / "c.jsonl.gz", "wt") as f:
        f.write("".join(lines))
    tok = tmp_path / "t.json"
    with pytest.raises(SourceError, match=r"line 8 of .*c\.jsonl\.gz"):
        for i in range(2):
            TokenCorpus.build_shard(src, tmp_path / "m", (i, 2), tok, progress=False)
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "s", (i, 2), tok, on_error="skip", progress=False)
    merged = TokenCorpus.merge(tmp_path / "s")
    assert merged.meta["skipped"] == 1 and len(merged) == 700 + 60 + 40 - 1


def test_shard_arguments_are_checked(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    with pytest.raises(ValueError, match="shard 3/3"):
        TokenCorpus.build_shard(src, tmp_path / "m", (3, 3), tmp_path / "t.json")
    with pytest.raises(ValueError, match="build_shard"):
        TokenCorpus.build(src, tmp_path / "m", tmp_path / "t.json", shard=(0, 2))  # type: ignore[arg-type]
    with pytest.raises(StoreFormatError, match="no shards to merge"):
        TokenCorpus.merge(tmp_path / "empty")


def test_a_store_source_is_dealt_out_by_rows(tmp_path: Path) -> None:
    import lading

    src = inputs(tmp_path)
    store = lading.build_store(src / "a.jsonl", tmp_path / "store", progress=False)
    tok = tmp_path / "t.json"
    one = TokenCorpus.build(tmp_path / "store", tmp_path / "one", tok, progress=False)
    for i in range(3):
        TokenCorpus.build_shard(tmp_path / "store", tmp_path / "m", (i, 3), tok, progress=False)
    same_reading(one, TokenCorpus.merge(tmp_path / "m"))
    assert len(store) == len(one)


def _auto(rank: int, world: int, src: str, dest: str, tok: str) -> dict[str, Any]:
    corpus = TokenCorpus.build(src, dest, tok, shard="auto", progress=False)
    return {"snapshot": corpus.snapshot, "parts": len(corpus.meta["parts"]), "n": len(corpus)}


@pytest.mark.slow
def test_under_torchrun_every_rank_builds_a_shard_and_rank_0_merges(tmp_path: Path) -> None:
    from distributed import run_processes

    src = inputs(tmp_path)
    tok = tmp_path / "t.json"
    results = run_processes(_auto, 3, str(src), str(tmp_path / "s"), str(tok))
    assert len({r["snapshot"] for r in results}) == 1 and {r["parts"] for r in results} == {3}
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    same_reading(one, TokenCorpus.open(tmp_path / "s"))


def _auto_skip(rank: int, world: int, src: str, dest: str, tok: str) -> list[str]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        TokenCorpus.build(src, dest, tok, shard="auto", on_error="skip", progress=False)
    return [
        f"{w.message} @{Path(w.filename).name}"  # (the line a user's log points at)
        for w in said
        if issubclass(w.category, SkippedRecordsWarning)
    ]


@pytest.mark.slow
def test_under_torchrun_rank_0_says_what_every_shard_skipped(tmp_path: Path) -> None:
    """A malformed line in shard 1 of 2: its rank warned of its own shard, and rank 0 (whose
    log is the one read) returned a corpus with ``skipped = 1`` and said nothing, where a
    one-process build warns. Rank 0 now warns of the whole corpus's skips."""
    from distributed import run_processes

    src = inputs(tmp_path)
    lines = (src / "a.jsonl").read_text().splitlines(keepends=True)
    lines[650] = '{"text": "w1 w2", oops\n'
    (src / "a.jsonl").write_text("".join(lines))
    tok = tmp_path / "t.json"
    said = run_processes(_auto_skip, 2, str(src), str(tmp_path / "s"), str(tok))
    assert TokenCorpus.open(tmp_path / "s").meta["skipped"] == 1
    assert any("skipped 1 malformed record(s)" in m and "line 651" in m for m in said[0]), said
    assert all(m.endswith(f"@{Path(__file__).name}") for m in said[0]), said
    assert any("shard 1/2" in m for m in said[1]), said  # the shard's own worker, as before
    again = run_processes(_auto_skip, 2, str(src), str(tmp_path / "s"), str(tok))
    assert again[0] == [], again  # a rerun that commits nothing new: as a one-process rerun


def _auto_url(rank: int, world: int, src: str, dest: str, tok: str, here: str) -> str:
    os.chdir(here)  # (where a URL taken for a folder would be written: ./s3:/...)
    try:
        TokenCorpus.build(src, dest, tok, shard="auto", progress=False)
    except ValueError as e:
        return str(e)
    return "built"


@pytest.mark.slow
def test_shard_auto_into_a_url_is_refused_naming_the_sharded_route(tmp_path: Path) -> None:
    """``shard="auto"`` under torchrun into ``s3://...`` builds on a filesystem every rank
    sees, as for stores; it is refused naming ``build_shard`` into the URL and ``merge`` (it
    built a local folder ``./s3:/bucket/...`` on every rank and said nothing: the bucket stayed
    empty)."""
    from distributed import run_processes

    src = inputs(tmp_path)
    tok = tmp_path / "t.json"
    here = tmp_path / "cwd"
    here.mkdir()
    said = run_processes(
        _auto_url, 2, str(src), "s3://no-bucket-needed/corpus", str(tok), str(here)
    )
    for text in said:
        assert "build_shard" in text and "merge" in text and "s3://no-bucket-needed" in text, text
    assert list(here.iterdir()) == []


def test_shard_auto_over_several_nodes_names_a_fix_token_corpora_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks over two nodes building a token corpus on what may be node-local disks are
    refused naming ``LADING_SHARED_FS=1``, the one setting ``TokenCorpus.build`` takes (the
    stores' message named ``shared_fs=True`` too, which ``TokenCorpus.build`` refused as an
    unknown argument)."""
    from lading.lm.cluster import build_in_group
    from lading.lm.shards import DocumentOptions

    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # one rank a node: two nodes
    monkeypatch.delenv("LADING_SHARED_FS", raising=False)
    src = inputs(tmp_path)
    with pytest.raises(ValueError) as caught:
        build_in_group(src, tmp_path / "c", tmp_path / "t.json", None, False, DocumentOptions())
    text = str(caught.value)
    assert "LADING_SHARED_FS=1" in text and "shared_fs=True" not in text, text


def _auto_overwrite(rank: int, world: int, src: str, dest: str, tok: str) -> str:
    try:
        TokenCorpus.build(src, dest, tok, shard="auto", overwrite=True, progress=False)
    except ValueError as e:
        return str(e)
    return "built"


@pytest.mark.slow
def test_overwrite_with_shards_is_refused_as_a_stores_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard is never overwritten (its folder is named by its inputs): ``overwrite=True``
    under torchrun, and ``--overwrite`` with ``--shard`` on the CLI, are refused naming
    ``build_id`` (they were taken and ignored: the old snapshot came back, exit 0)."""
    from distributed import run_processes

    src = inputs(tmp_path)
    tok = tmp_path / "t.json"
    said = run_processes(_auto_overwrite, 2, str(src), str(tmp_path / "s"), str(tok))
    assert all("build_id" in s for s in said), said
    for kind in (["lm", "build"], ["build"]):
        args = [*kind, str(src / "a.jsonl"), str(tmp_path / "cli"), "--shard", "0/2"]
        tokenizer = ["--tokenizer", str(tok)] if kind[0] == "lm" else []
        assert main([*args, *tokenizer, "--overwrite", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "never overwritten" in err and "--build-id" in err, err


@pytest.mark.slow
def test_a_worker_killed_mid_shard_leaves_nothing_a_merge_takes(tmp_path: Path) -> None:
    # killed as soon as its scratch folder appears: this shard went from that folder to its
    # rename in 0.23-0.25 s on an idle machine, so the 0.3 s wait this test had before its
    # kill missed the shard whenever the machine was not busy
    rng = np.random.default_rng(SEED)
    src = write(
        tmp_path / "big.jsonl",
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts(rng, 40_000))),
    )
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    dest = tmp_path / "s"
    build = [sys.executable, "-m", "lading", "lm", "build", str(src), str(dest)]
    build += ["--tokenizer", str(tok), "--quiet", "--shard"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert subprocess.run([*build, "1/2"], capture_output=True, env=env).returncode == 0
    proc = subprocess.Popen(
        [*build, "0/2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(dest.glob("build-*/shard-00000-of-00002.tmp-*")):
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    assert list(dest.glob("build-*/shard-00000-of-00002.tmp-*")), "the kill missed the shard"
    with pytest.raises(StoreFormatError, match="missing 0"):
        TokenCorpus.merge(dest)
    assert not (dest / "meta.json").exists()
    assert subprocess.run([*build, "0/2"], capture_output=True, env=env).returncode == 0
    assert not list(dest.glob("build-*/*.tmp-*"))  # the dead worker's temp went
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    same_reading(one, TokenCorpus.merge(dest))


def test_offsets_read_in_place_index_as_one_array(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    tok = tmp_path / "t.json"
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    for i in range(3):
        TokenCorpus.build_shard(src, tmp_path / "m", (i, 3), tok, progress=False)
    offsets, want = TokenCorpus.merge(tmp_path / "m").offsets, np.asarray(one.offsets)
    assert len(offsets) == len(want)
    for at in (0, 1, len(want) // 3, len(want) - 1, -1, -len(want)):
        assert int(offsets[at]) == int(want[at]), at
    rows = np.random.default_rng(SEED).integers(0, len(want), 500)
    assert np.array_equal(offsets[rows], want[rows])
    assert np.array_equal(offsets[5:300:7], want[5:300:7])
    for bad in (len(want), -len(want) - 1):
        with pytest.raises(IndexError):
            offsets[bad]
    with pytest.raises(IndexError):
        offsets[np.array([0, len(want)])]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_merged_corpus_holds_no_descriptor_a_part(tmp_path: Path) -> None:
    """A corpus built in many shards is read with no file descriptor held a part: each
    part's offsets kept one (Python's mmap holds a dup of it), so a corpus of 2,000 shards
    met a limit of 1,024 open files at its open (seen on the old code: one held a part)."""
    src = inputs(tmp_path)
    tok = tmp_path / "t.json"
    for i in range(12):
        TokenCorpus.build_shard(src, tmp_path / "m", (i, 12), tok, progress=False)
    merged = TokenCorpus.merge(tmp_path / "m")
    reopened = TokenCorpus.open(tmp_path / "m")
    assert len(merged.meta["parts"]) == 12
    from lading.lm.parts import PartTokens

    assert isinstance(merged.tokens, PartTokens)
    if merged.tokens.joined is None:
        pytest.skip("this platform maps each part's file alone (no joined range)")
    assert files_open_under(tmp_path / "m") == []
    one = TokenCorpus.build(src, tmp_path / "one", tok, progress=False)
    assert np.array_equal(np.asarray(reopened.offsets), np.asarray(one.offsets))


@pytest.mark.parametrize(
    ("field", "value"),
    [("dir", "../../outside"), ("dir", "/etc"), ("tokens", -1), ("documents", "many")],
)
def test_a_damaged_parts_entry_is_refused_naming_it(
    tmp_path: Path, field: str, value: object
) -> None:
    src = inputs(tmp_path)
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "m", (i, 2), tmp_path / "t.json", progress=False)
    TokenCorpus.merge(tmp_path / "m")
    meta_path = tmp_path / "m" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["parts"][1][field] = value
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(StoreFormatError, match=rf"parts\[1\]\.{field}"):
        TokenCorpus.open(tmp_path / "m")


def test_a_part_whose_tokens_do_not_match_is_refused(tmp_path: Path) -> None:
    src = inputs(tmp_path)
    for i in range(2):
        TokenCorpus.build_shard(src, tmp_path / "m", (i, 2), tmp_path / "t.json", progress=False)
    TokenCorpus.merge(tmp_path / "m")
    meta_path = tmp_path / "m" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["parts"][0]["tokens"] += 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(StoreFormatError, match=r"shard-00000-of-00002/tokens\.bin"):
        TokenCorpus.open(tmp_path / "m")


def test_token_parts_serve_every_slice_as_one_array_would() -> None:
    """``PartTokens`` (a merged corpus's tokens, one array a shard) answers ``[a:b]``, its
    fast path for in-range slices, ``span(a, b)`` (what the epoch stream reads a piece with)
    and the general slices as the concatenated array does, views within one part."""
    from lading.lm.parts import PartTokens

    rng = np.random.default_rng(SEED)
    print(f"seed: LADING_TEST_SEED={SEED}")
    parts = [rng.integers(0, 60000, int(n)).astype("<u2") for n in (7, 0, 1, 30, 12)]
    tokens, whole = PartTokens(parts, np.dtype("<u2")), np.concatenate(parts)
    n = len(whole)
    for _ in range(2000):
        a, b = sorted(int(x) for x in rng.integers(0, n + 1, 2))
        assert np.array_equal(tokens[a:b], whole[a:b]), (a, b)
        assert np.array_equal(tokens.span(a, b), whole[a:b]), (a, b)
        c, d = (int(x) for x in rng.integers(-n - 3, n + 4, 2))
        assert np.array_equal(tokens[c:d], whole[c:d]), (c, d)
        assert np.array_equal(tokens[c:], whole[c:]) and np.array_equal(tokens[:d], whole[:d])
        assert np.array_equal(tokens[c:d:2], whole[c:d:2]), (c, d)
    view = tokens[8:20]  # inside part 3 (from 8 to 38): a view of its array, no copy
    assert np.shares_memory(view, parts[3])


def test_a_merge_of_the_other_kinds_shards_names_the_command_that_merges_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lading merge`` over a token corpus's shards, and ``lading lm merge`` over a store's,
    name what the shards are and the merge to run (each read the other's shard.json and said
    it was damaged: "rebuild the store")."""
    import lading
    from lading.cli import main

    src = inputs(tmp_path)
    for i in range(2):
        TokenCorpus.build_shard(src / "a.jsonl", tmp_path / "c", (i, 2), tmp_path / "t.json")
        lading.build_shard(src / "a.jsonl", tmp_path / "s", (i, 2), progress=False)
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "c")]) == 2
    said = capsys.readouterr().err
    assert "token corpus" in said and "lading lm merge" in said and "rebuild" not in said, said
    assert main(["lm", "merge", str(tmp_path / "s")]) == 2
    said = capsys.readouterr().err
    assert "store" in said and "lading merge" in said and "rebuild" not in said, said
    assert not (tmp_path / "c" / "meta.json").exists()  # nothing committed
    assert not (tmp_path / "s" / "meta.json").exists()


def test_too_many_shards_of_text_files_says_only_jsonl_is_cut(tmp_path: Path) -> None:
    """A token corpus cuts JSONL files at lines and nothing else: more shards than TSV files
    is refused saying so (it said "cannot all be split at lines (compressed, or not
    TSV/JSONL)" of files that were TSV)."""
    src = tmp_path / "src"
    for i in range(3):
        write(src / f"f{i}.tsv", "".join(f"d{j}\tw{j} w1\n" for j in range(20)))
    tok = word_tokenizer(WORDS, tmp_path / "t.json")
    with pytest.raises(ValueError) as caught:
        TokenCorpus.build_shard(src, tmp_path / "c", (0, 4), tok, progress=False)
    text = str(caught.value)
    assert "shard 3 would read nothing" in text and "TSV" not in text, text
    assert "JSONL" in text, text
