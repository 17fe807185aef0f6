"""A merged corpus's reads, found a batch at a time, as a one-file corpus's, token for token.

The epoch stream keeps each run's part beside its start in that part's file
(:meth:`~lading.lm.parts.PartOffsets.spans`), and the window modes read a batch's pieces found
at once with numpy (``read_many``). Checked against the one-file corpus of the same tokens and
against reading one window at a time: parts of no document (between others and at the end),
documents of no token, runs that would cross a part's end (stored order), backward streams,
reads past the epoch's end (read one by one) and batches that are not one block of memory.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import word_tokenizer, write
from lading.lm import LanguageModelLoader, Packed, TokenCorpus, Windows, parts
from lading.lm.joined import join_files
from lading.lm.packing import pack
from lading.lm.parts import PartOffsets, PartTokens
from lading.lm.stream import EpochStream
from lading.lm.windows import PackedWindows, StreamWindows
from lading.world import World

SEED = int(os.environ.get("LADING_TEST_SEED", "49"))


class Tokens:
    """What the epoch stream reads of a corpus: ``tokens``, ``offsets`` and ``parts()``."""

    parts = TokenCorpus.parts

    def __init__(self, tokens: Any, offsets: Any) -> None:
        self.tokens, self.offsets = tokens, offsets


def corpora(
    rng: np.random.Generator, folder: Path | None = None, lengths: list[Any] | None = None
) -> tuple[Tokens, Tokens]:
    """(one file, the same documents in parts): by default parts of 0-40 documents (some of
    none, one between others and one last), documents of 0-30 tokens (some of none); or
    parts of the document lengths given. With ``folder``, the parts are files there, mapped
    into one range of addresses (:func:`~lading.lm.joined.join_files`) as a local merged
    corpus's are."""
    if lengths is None:
        counts = [int(n) for n in rng.integers(0, 41, 5)] + [0, int(rng.integers(1, 30)), 0]
        lengths = []
        for count in counts:
            part = rng.integers(0, 31, count)
            part[rng.random(count) < 0.1] = 0
            lengths.append(part)
    parts_tokens, parts_offsets = [], []
    for part in lengths:
        offsets = np.zeros(len(part) + 1, dtype=np.uint64)
        np.cumsum(part, out=offsets[1:])
        parts_offsets.append(offsets)
        parts_tokens.append(rng.integers(0, 60000, int(offsets[-1])).astype("<u2"))
    whole = np.concatenate(parts_tokens)
    joined = joined_offsets = None
    if folder is not None:
        paths = [folder / f"{k}.bin" for k in range(len(parts_tokens))]
        for path, array in zip(paths, parts_tokens):
            array.tofile(path)
        joined = join_files(paths, np.dtype("<u2"))
        if joined is None:
            pytest.skip("this platform maps token files one by one")
        parts_tokens = [joined[0][a : a + n] for a, n in zip(joined[1].tolist(), joined[2])]
        parts_offsets, joined_offsets = joined_arrays(folder, "off", parts_offsets)
    tokens = PartTokens(parts_tokens, np.dtype("<u2"), None if joined is None else joined[:2])
    merged = Tokens(tokens, PartOffsets(parts_offsets, tokens.bases, joined_offsets))
    return Tokens(whole, np.asarray(merged.offsets)), merged


def joined_arrays(
    folder: Path, suffix: str, arrays: list[np.ndarray]
) -> tuple[list[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``arrays`` written to files in ``folder`` and mapped into one range (as a local merged
    corpus's offsets are): the views of each, and (the joined array, where each starts)."""
    paths = [folder / f"{k}.{suffix}" for k in range(len(arrays))]
    for path, array in zip(paths, arrays):
        array.tofile(path)
    got = join_files(paths, arrays[0].dtype)
    assert got is not None
    whole, starts, counts = got
    return [whole[a : a + n] for a, n in zip(starts.tolist(), counts)], (whole, starts)


def test_joined_offsets_gather_as_a_pass_a_part(tmp_path: Path) -> None:
    """Offsets joined in one range are gathered in one numpy pass (``PartOffsets(joined=)``):
    the same offsets and spans as the pass a part, for documents in any order, parts of no
    document included, and the same refusal of a document out of range."""
    rng = np.random.default_rng(SEED)
    print("LADING_TEST_SEED", SEED)
    counts = [0, 3, 0, 7, 1, 0, 12, 0]
    offsets = []
    for n in counts:
        o = np.zeros(n + 1, dtype=np.uint64)
        np.cumsum(rng.integers(0, 9, n), out=o[1:])
        offsets.append(o)
    bases = np.concatenate([[0], np.cumsum([int(o[-1]) for o in offsets])]).astype(np.int64)
    views, joined = joined_arrays(tmp_path, "off", offsets)
    by_part, at_once = PartOffsets(offsets, bases), PartOffsets(views, bases, joined)
    n = sum(counts)
    for rows in (np.arange(n + 1), rng.integers(0, n + 1, 50), rng.integers(0, n + 1, (4, 6))):
        assert np.array_equal(at_once[rows], by_part[rows])
    for documents in (np.arange(n), rng.permutation(n), rng.integers(0, n, 40).astype(np.int32)):
        got, want = at_once.spans(documents), by_part.spans(documents)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)
    for bad in ([n], [-1]):
        for table in (at_once, by_part):
            with pytest.raises(IndexError):
                table.spans(np.array(bad))


def forward(stream: EpochStream, whole: np.ndarray) -> np.ndarray:
    """The whole epoch stream, forward, from the runs' ranges of the concatenated tokens."""
    pieces = [whole[a : a + n] for a, n in zip(stream.doc_start.tolist(), stream.lengths.tolist())]
    return np.concatenate(pieces)


def same_stream(
    a: EpochStream, b: EpochStream, whole: np.ndarray, rng: np.random.Generator, widest: int
) -> None:
    """``b`` reads as ``a`` (the one-file stream): the runs' ranges in the corpus's count,
    reads of many windows at once and one at a time, within the epoch and past its end, and
    the pieces' ranges of those reads."""
    assert a.total == b.total
    assert np.array_equal(forward(b, whole), forward(a, whole))
    width = int(rng.integers(1, min(a.total, widest) + 1))
    inside = rng.integers(0, a.total - width + 1, 12)  # reads within the epoch
    past = rng.integers(0, 3 * a.total, 12)  # some read past its end: they wrap
    for starts in (inside, past):
        want = np.empty((len(starts), width), dtype=np.int64)
        for row, start in enumerate(starts.tolist()):
            a.read(start, want[row])
        for s in (a, b):
            rows = np.empty_like(want)
            s.read_many(starts, rows)
            assert np.array_equal(rows, want), (starts, width)
            for row, start in enumerate(starts.tolist()):
                s.read(start, rows[row])
                assert np.array_equal(rows[row], want[row]), (start, width)
            # the pieces' ranges of the corpus's count read what the rows hold
            pieces = s.pieces(starts, width)
            for row in range(len(starts)):
                ranges = pieces[pieces[:, 0] == row, 1:].tolist()
                got = np.concatenate([whole[p:q] for p, q in ranges])
                assert np.array_equal(got[::-1] if a.backwards else got, want[row])


@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_merged_stream_reads_as_the_one_file_stream(shuffle: bool, backwards: bool) -> None:
    rng = np.random.default_rng(SEED)
    print(f"seed: LADING_TEST_SEED={SEED}")
    for _ in range(20):
        one, merged = corpora(rng)
        n_docs = len(one.offsets) - 1
        for documents in (
            np.arange(n_docs),  # every document, in order: read a part at a time
            np.sort(rng.choice(n_docs, n_docs // 2, replace=False)),
            rng.permutation(n_docs)[: n_docs // 2 + 1],  # another order: gathered by part
        ):
            try:
                a = EpochStream(one, documents, 3, 1, shuffle, backwards)  # type: ignore[arg-type]
            except ValueError:  # fewer than 2 tokens: refused alike
                with pytest.raises(ValueError, match="nothing to predict"):
                    EpochStream(merged, documents, 3, 1, shuffle, backwards)  # type: ignore[arg-type]
                continue
            b = EpochStream(merged, documents, 3, 1, shuffle, backwards)  # type: ignore[arg-type]
            # not joined: every run lies in one part's file (none crosses a part's end)
            assert b.run_part is not None
            sizes = np.diff(merged.tokens.bases)
            ends = b.run_from.astype(np.int64) + b.run_len
            assert (ends <= sizes[b.run_part]).all()
            same_stream(a, b, np.asarray(one.tokens), rng, a.total)


@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_stream_of_parts_joined_in_one_array_reads_as_the_one_file_stream(
    tmp_path: Path, shuffle: bool, backwards: bool
) -> None:
    """Parts mapped into one range of addresses, each from a 2 MiB boundary: one of exactly
    2 MiB (it ends where the next starts: a stored-order run goes on across that end), parts
    of no document between others and last, documents of no token."""
    rng = np.random.default_rng(SEED)
    print(f"seed: LADING_TEST_SEED={SEED}")
    exact = np.full(4, (2 << 20) // 2 // 4)  # 2 MiB of uint16 tokens in 4 documents
    small = [rng.integers(0, 31, int(n)) for n in rng.integers(1, 60, 3)]
    small[1][:3] = 0
    lengths = [exact, small[0], [], small[1], exact, [], small[2], []]
    one, merged = corpora(rng, tmp_path, lengths)
    assert merged.tokens.joined is not None and merged.tokens.joined_starts is not None
    starts = merged.tokens.joined_starts.tolist()
    assert all(start % ((2 << 20) // 2) == 0 for start in starts)
    n_docs = len(one.offsets) - 1
    for documents in (np.arange(n_docs), rng.permutation(n_docs)[: n_docs // 2 + 1]):
        a = EpochStream(one, documents, 3, 1, shuffle, backwards)  # type: ignore[arg-type]
        b = EpochStream(merged, documents, 3, 1, shuffle, backwards)  # type: ignore[arg-type]
        assert b.run_part is None and b.files[0] is merged.tokens.joined
        if not shuffle and len(documents) == n_docs:  # the stored order: a run goes on
            # across each exact part's end into the next part, and stops at the others' (the
            # rest of their last 2 MiB is padding): 3 runs of 5 parts holding documents
            assert len(b.run_len) == 3 and len(a.run_len) == 1
        for _ in range(5):
            same_stream(a, b, np.asarray(one.tokens), rng, 3000)


def test_spans_find_each_documents_part_in_any_order() -> None:
    rng = np.random.default_rng(SEED)
    one, merged = corpora(rng)
    offsets = merged.offsets
    assert isinstance(offsets, PartOffsets)
    flat = np.asarray(one.offsets).astype(np.int64)
    n_docs = len(flat) - 1
    bases = merged.tokens.bases
    for rows in (
        np.arange(n_docs),
        np.sort(rng.integers(0, n_docs, 50)),
        rng.integers(0, n_docs, 50),
        np.zeros(0, dtype=np.int64),
    ):
        part, first, end = offsets.spans(rows)
        assert np.array_equal(first + bases[part], flat[rows])
        assert np.array_equal(end + bases[part], flat[rows + 1])
        assert (offsets.doc_bases[part] <= rows).all()
        assert (rows < offsets.doc_bases[part + 1]).all()  # a part of no document is never named
    for bad in ([n_docs], [-1], [0, n_docs]):
        with pytest.raises(IndexError):
            offsets.spans(np.array(bad))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TokenCorpus]:
    """A one-process build ("one") and 7 shards merged of a document of 20,000 words, 200 of
    1-90 and 5 of 1-3: the shards that start inside the long one hold no document. The merged
    corpus opened with its parts joined in one array ("joined", where the platform can) and
    mapped one by one ("parts")."""
    folder = tmp_path_factory.mktemp("built")
    rng = np.random.default_rng(SEED)
    words = [f"w{i}" for i in range(50)]
    lines = [" ".join(rng.choice(words, 20_000))]
    lines += [" ".join(rng.choice(words, int(rng.integers(1, 90)))) for _ in range(200)]
    write(folder / "src" / "a.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in lines))
    write(folder / "src" / "b.txt", "w1 w2\n\nw3\n\nw4 w5 w6\n\nw7\n\nw8\n")
    tok = word_tokenizer(words, folder / "t.json")
    one = TokenCorpus.build(folder / "src", folder / "one", tok, progress=False)
    for i in range(7):
        TokenCorpus.build_shard(folder / "src", folder / "m", (i, 7), tok, progress=False)
    joined = TokenCorpus.merge(folder / "m")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parts, "join_files", lambda *args: None)
        one_by_one = TokenCorpus.open(folder / "m")
    assert isinstance(one_by_one.tokens, PartTokens) and one_by_one.tokens.joined is None
    return {"one": one, "joined": joined, "parts": one_by_one}


def test_the_padding_between_joined_files_reads_as_zeros_not_a_crash(
    built: dict[str, TokenCorpus],
) -> None:
    """No document spans the padding after a file's last page, but a read sent there by a
    damaged ``tokens.off`` must not kill the process: it reads zeros (the reservation was
    ``PROT_NONE``: SIGSEGV). In a child, so that a crash is a failed test, not a dead run."""
    tokens = built["joined"].tokens
    assert isinstance(tokens, PartTokens)
    if tokens.joined is None:
        pytest.skip("this platform maps token files one by one")
    code = (
        "import sys; from lading.lm import TokenCorpus\n"
        "t = TokenCorpus.open(sys.argv[1]).tokens\n"
        "ends = [int(s) + len(p) for s, p in zip(t.joined_starts, t.parts)]\n"
        "nexts = [*(int(s) for s in t.joined_starts[1:]), len(t.joined)]\n"
        "print(sum(int(t.joined[e:n].sum()) for e, n in zip(ends, nexts)), sum(n - e for e, n "
        "in zip(ends, nexts)) > 500_000)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(built["joined"].path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["0", "True"]  # zeros, over more than the files' last pages


def test_a_thread_still_reading_the_joined_array_at_exit_does_not_crash_the_process(
    built: dict[str, TokenCorpus],
) -> None:
    """The range was unmapped at the interpreter's exit (weakref.finalize runs at exit by
    default) while the arrays over it were still alive: a daemon thread reading them then
    (a user's, a loader's read-ahead) read unmapped memory, and a run that had finished ended
    by SIGSEGV (-11), where a one-file corpus's map exits 0. In a child, as above."""
    tokens = built["joined"].tokens
    assert isinstance(tokens, PartTokens)
    if tokens.joined is None:
        pytest.skip("this platform maps token files one by one")
    code = (
        "import sys, threading; from lading.lm import TokenCorpus\n"
        "joined = TokenCorpus.open(sys.argv[1]).tokens.joined\n"
        "began = threading.Event()\n"
        "def read():\n"
        "    while True:\n"
        "        joined.sum(); began.set()\n"
        "threading.Thread(target=read, daemon=True).start()\n"
        "began.wait(60); print('read')\n"
    )
    for _ in range(3):  # (each exit unmapped it under the thread's read before)
        done = subprocess.run(
            [sys.executable, "-c", code, str(built["joined"].path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout.split()) == (0, ["read"]), done.stderr[-2000:]


def test_the_joined_arrays_cannot_be_made_writable(built: dict[str, TokenCorpus]) -> None:
    """The arrays over a one-file corpus's map refuse ``flags.writeable = True``; the joined
    one (a ctypes array's buffer, writable) took it, and a write then killed the process
    (the pages are read-only)."""
    tokens = built["joined"].tokens
    assert isinstance(tokens, PartTokens)
    if tokens.joined is None:
        pytest.skip("this platform maps token files one by one")
    for array in (tokens.joined, tokens.parts[0], tokens.joined[5:9]):
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="WRITEABLE"):
            array.flags.writeable = True
    with pytest.raises(ValueError, match="WRITEABLE"):
        built["one"].tokens.flags.writeable = True  # as a one-file corpus's map
    assert_read_only_down(tokens.joined)


def assert_read_only_down(array: np.ndarray) -> None:
    """No object under ``array`` (its bases, a memoryview's owner) exports a writable
    buffer: a ctypes array there did, and a write through ``array.base.obj`` hit read-only
    pages and killed the process (a Python map's refuses it). Checked without writing."""
    seen, obj = 0, array
    while obj is not None and seen < 10:
        assert not np.frombuffer(obj, dtype=np.uint8).flags.writeable, type(obj)
        obj = getattr(obj, "base", None) if isinstance(obj, np.ndarray) else obj.obj
        seen += 1


def test_a_local_merged_corpus_maps_its_parts_into_one_array(
    built: dict[str, TokenCorpus],
) -> None:
    """Each part a view of one read-only array, from a 2 MiB boundary; the range unmapped
    when the corpus and every array over it are gone."""
    tokens = built["joined"].tokens
    assert isinstance(tokens, PartTokens)
    if tokens.joined is None:
        pytest.skip("this platform maps token files one by one")
    assert tokens.joined_starts is not None and not tokens.joined.flags.writeable
    for part, start in zip(tokens.parts, tokens.joined_starts.tolist()):
        assert start % ((2 << 20) // tokens.dtype.itemsize) == 0
        view = tokens.joined[start : start + len(part)]
        assert np.array_equal(part, view) and (not len(part) or np.shares_memory(part, view))
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return
    folder = str(built["joined"].path)

    def mapped() -> int:
        return sum(folder in line and "tokens.bin" in line for line in maps.read_text().split("\n"))

    before = mapped()
    opened = TokenCorpus.open(folder)
    assert mapped() == before + sum(1 for part in tokens.parts if len(part))
    del opened
    gc.collect()
    assert mapped() == before


def test_packed_batches_read_as_one_window_at_a_time(built: dict[str, TokenCorpus]) -> None:
    rng = np.random.default_rng(SEED)
    documents = np.arange(len(built["one"]))
    packing = pack(built["one"].lengths(), 33, 1)
    readers = [PackedWindows(c, documents, packing, 0) for c in built.values()]
    for _ in range(30):
        order = rng.integers(0, packing.windows, int(rng.integers(1, 9)))
        wanted = np.empty((len(order), 33), dtype=np.int64)
        wanted_ids = np.empty_like(wanted)
        for row, window in enumerate(order.tolist()):
            readers[0].read(window, wanted[row], wanted_ids[row])
        for reader in readers:
            got, ids = np.empty_like(wanted), np.empty_like(wanted)
            reader.read_many(order, got, ids)
            assert np.array_equal(got, wanted) and np.array_equal(ids, wanted_ids)
            reader.read_many(order, got, None)
            assert np.array_equal(got, wanted)
            wide = np.zeros((len(order), 40), dtype=np.int64)  # not one block: window by window
            reader.read_many(order, wide[:, :33], ids)
            assert np.array_equal(wide[:, :33], wanted) and not wide[:, 33:].any()


@pytest.mark.parametrize("shuffle_documents", [True, False])
def test_stream_windows_of_a_batch_read_as_one_window_at_a_time(
    built: dict[str, TokenCorpus], shuffle_documents: bool
) -> None:
    rng = np.random.default_rng(SEED)
    documents = np.arange(len(built["one"]))
    for backwards in (False, True):
        windows = [
            StreamWindows(EpochStream(c, documents, 2, 0, shuffle_documents, backwards), 16)
            for c in built.values()
        ]
        order = rng.integers(0, windows[0].n, 8)
        wanted = np.empty((8, 17), dtype=np.int64)
        wanted_ids = np.empty_like(wanted)
        for row, window in enumerate(order.tolist()):
            windows[0].read(window, wanted[row], wanted_ids[row])
        for reader in windows:
            got, ids = np.empty_like(wanted), np.empty_like(wanted)
            reader.read_many(order, got, ids)
            assert np.array_equal(got, wanted) and np.array_equal(ids, wanted_ids)
            wide = np.zeros((8, 20), dtype=np.int64)
            reader.read_many(order, wide[:, :17], None)
            assert np.array_equal(wide[:, :17], wanted) and not wide[:, 17:].any()


@pytest.mark.parametrize("merged", ["joined", "parts"])
@pytest.mark.parametrize(
    "sequence",
    [Windows(16), Windows(16, shuffle_documents=False, backwards=True), Packed(24)],
    ids=["windows", "windows-stored-backwards", "packed"],
)
def test_a_merged_corpus_with_parts_of_no_document_reads_as_the_one_process_build(
    built: dict[str, TokenCorpus], sequence: Any, merged: str
) -> None:
    one, other = built["one"], built[merged]
    assert 0 in [p["documents"] for p in other.meta["parts"]][1:-1]
    for shuffle in (True, False):
        a = LanguageModelLoader(one, 5, sequence, seed=4, shuffle=shuffle, world=World())
        b = LanguageModelLoader(other, 5, sequence, seed=4, shuffle=shuffle, world=World())
        for epoch in range(2):
            a.set_epoch(epoch)
            b.set_epoch(epoch)
            for x, y in zip(a, b, strict=True):
                for u, v in zip(x, y, strict=True):
                    assert np.array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("merged", ["joined", "parts"])
def test_a_corpus_of_stored_order_splits_its_runs_at_each_parts_end(
    built: dict[str, TokenCorpus], merged: str
) -> None:
    """A run a part holding documents, its start in the corpus's count (here no part's file
    ends at a 2 MiB boundary, where a joined one's run would go on into the next part)."""
    one, other = built["one"], built[merged]
    documents = np.arange(len(one))
    a = EpochStream(one, documents, 0, 0, False, False)
    b = EpochStream(other, documents, 0, 0, False, False)
    assert len(a.run_len) == 1  # one file: the whole stream is one run
    holding = np.array([p["documents"] for p in other.meta["parts"]]) > 0
    assert isinstance(other.tokens, PartTokens)
    assert np.array_equal(b.doc_start, other.tokens.bases[:-1][holding])
    whole = other.token_arrays()[0]
    assert np.array_equal(forward(a, whole), forward(b, whole))
