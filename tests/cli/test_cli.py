"""The command line: synth → build → inspect → get → verify, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from lading.cli import main


def _listed(store: str) -> set[str]:
    """The names of the files a store's manifest lists."""
    from lading.stores import open_store

    return {Path(name).name for name in open_store(store).meta["files"]}


def test_synth_build_inspect_get(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "passages", "500", str(tmp_path / "c")]) == 0
    for name in ("collection.tsv", "queries.tsv", "qrels.txt", "run.trec"):
        assert (tmp_path / "c" / name).stat().st_size > 0
    assert (
        main(["build", str(tmp_path / "c" / "collection.tsv"), str(tmp_path / "s"), "--quiet"]) == 0
    )
    assert "500 documents" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "s"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["documents"], info["index"], info["stale"]) == (500, "runs", None)
    on_disk = [p for p in Path(info["path"]).rglob("*") if p.is_file()]
    files = {p.name: p.stat().st_size for p in on_disk if p.name in _listed(info["path"])}
    assert (info["bytes"], info["files"]) == (sum(files.values()), len(files)), info  # numbers
    assert main(["get", str(tmp_path / "s"), "3", "nope"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == "3" and "'nope' is not in" in err
    assert main(["verify", str(tmp_path / "s")]) == 0


def test_synth_is_deterministic_and_shaped_like_msmarco(tmp_path: Path) -> None:
    main(["synth", "documents", "50", str(tmp_path / "a"), "--queries", "5"])
    main(["synth", "documents", "50", str(tmp_path / "b"), "--queries", "5"])
    for name in ("docs.jsonl", "queries.tsv", "qrels.txt", "run.trec"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    first = json.loads((tmp_path / "a" / "docs.jsonl").read_text().splitlines()[0])
    assert first["docid"].startswith("msmarco_doc_") and len(first["body"].split()) > 100
    run = (tmp_path / "a" / "run.trec").read_text().splitlines()
    assert run[0].split()[1] == "Q0" and run[0].split()[3] == "1"


def test_bad_input_is_one_line_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\tok\n2 no tab\n")
    assert main(["build", str(bad), str(tmp_path / "s"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lading build: line 2 of ") and "Traceback" not in err
    assert main(["build", str(bad), str(tmp_path / "s"), "--quiet", "--on-error", "skip"]) == 0
    assert "skipped 1 malformed record" in capsys.readouterr().out


def test_python_dash_m_runs_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lading", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("lading ")


_NO_TORCH = """
import sys
from lading.cli import main
rc = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("torch modules:", loaded)
sys.exit(rc or (3 if loaded else 0))
"""


@pytest.mark.e2e  # CLIs in subprocesses: the default run, not the unit tier
def test_lm_tokenizer_build_and_repartition_do_not_import_torch(tmp_path: Path) -> None:
    """Preparing data needs no torch: the commands run where only the data tools are installed,
    and they skip torch's import time (seconds) on every invocation."""
    pytest.importorskip("tokenizers")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from conftest import word_tokenizer, write

    src = write(tmp_path / "docs.txt", "alpha beta\n\nbeta gamma\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    pq.write_table(pa.table({"x": list(range(40))}), tmp_path / "t.parquet", row_group_size=7)
    commands = [
        ["lm", "tokenizer", str(src), str(tmp_path / "bpe"), "--vocab-size", "300"],
        ["lm", "build", str(src), str(tmp_path / "corpus"), "--tokenizer", str(tok), "--quiet"],
        ["repartition", str(tmp_path / "t.parquet"), str(tmp_path / "parts"), "--world-size", "2"],
    ]
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-c", _NO_TORCH, *command], capture_output=True, text=True
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "torch modules: []" in done.stdout
    assert (tmp_path / "corpus" / "meta.json").is_file()
    assert (tmp_path / "parts" / "part-0.parquet").is_file()
    trained = json.loads((tmp_path / "bpe" / "tokenizer.json").read_text())
    assert trained["model"]["type"] == "BPE" and "<|endoftext|>" in trained["model"]["vocab"]


def test_synth_documents_tsv_has_msmarco_columns_and_lengths(tmp_path: Path) -> None:
    assert main(["synth", "documents", "300", str(tmp_path / "d"), "--format", "tsv"]) == 0
    lines = (tmp_path / "d" / "docs.tsv").read_text().splitlines()
    rows = [line.split("\t") for line in lines]
    assert len(rows) == 300 and {len(r) for r in rows} == {4}
    ids = [r[0] for r in rows]
    assert len(set(ids)) == 300 and all(i.startswith("msmarco_doc_") for i in ids)
    words = sorted(len(r[3].split()) for r in rows)
    assert 600 < sum(words) / len(words) < 2000  # MS MARCO documents: ~1,100+ words
    assert words[-1] > 2 * words[len(words) // 2]  # a long tail
    assert all(r[3].startswith(r[2]) for r in rows)  # the title is the body's first words
    qrels = (tmp_path / "d" / "qrels.txt").read_text().split()
    assert qrels[2] in set(ids)


@pytest.mark.e2e  # worker processes write the corpus
@pytest.mark.parametrize(
    "kind,fmt", [("passages", "tsv"), ("documents", "tsv"), ("documents", "jsonl")]
)
def test_synth_workers_write_the_same_bytes_as_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, fmt: str
) -> None:
    import lading.bench.synth as synth_module

    monkeypatch.setattr(synth_module, "_BLOCK_WORDS", 3000)  # many blocks, several pool tasks
    n = 900 if kind == "passages" else 60
    one = synth_module.synth(kind, n, tmp_path / "one", queries=5, corpus_format=fmt)  # type: ignore[arg-type]
    assert (
        len(synth_module._blocks(synth_module._Generator(kind, n, 0)))
        > 4 * synth_module._TASK_BLOCKS
    )  # type: ignore[arg-type]
    args = ["synth", kind, str(n), str(tmp_path / "two"), "--queries", "5", "--format", fmt]
    assert main([*args, "--workers", "3"]) == 0
    two = tmp_path / "two" / one.corpus.name
    assert two.read_bytes() == one.corpus.read_bytes()
    assert len(one.corpus.read_bytes().splitlines()) == n
    assert not list((tmp_path / "two").glob("*.tmp-*"))


def test_synth_refuses_no_workers(tmp_path: Path) -> None:
    from lading.bench.synth import synth

    with pytest.raises(ValueError, match="workers must be at least 1"):
        synth("passages", 10, tmp_path / "p", workers=0)


def test_synth_passages_stream_as_msmarco_sized_lines(tmp_path: Path) -> None:
    from lading.bench.synth import synth

    files = synth("passages", 3000, tmp_path / "p", queries=20)
    lines = files.corpus.read_bytes().splitlines()
    assert [int(line.split(b"\t")[0]) for line in lines] == list(range(3000))
    mean = files.corpus.stat().st_size / 3000
    assert 250 < mean < 420, mean  # MS MARCO passages: 2.9 GB / 8.8M = ~330 bytes a line


def test_build_field_flags_make_one_parse_options(tmp_path: Path) -> None:
    from lading import ParseOptions, open_store

    tsv = tmp_path / "d.tsv"
    tsv.write_text("d1\thttp://a\tone\nd2\thttp://b\ttwo\n")
    columns = ["--columns", "id,url,text", "--quiet"]
    assert main(["build", str(tsv), str(tmp_path / "t"), *columns]) == 0
    store = open_store(tmp_path / "t")
    assert (store["d2"], store.field("d2", "url")) == ("two", "http://b")
    recorded = ParseOptions.from_dict(store.meta["build"])
    assert recorded == ParseOptions(columns=("id", "url", "text"))
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"key": "k1", "body": "one", "id": "x"}\n')
    flags = ["--id-field", "key", "--text-field", "body", "--quiet"]
    assert main(["build", str(jsonl), str(tmp_path / "j"), *flags]) == 0
    assert open_store(tmp_path / "j")["k1"] == "one"


def _edit_meta(directory: Path, **changes: object) -> None:
    path = directory / "meta.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, **changes}))


def test_verify_checks_at_least_what_open_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A meta.json whose count is wrong: every open refuses it, so verify must too."""
    import lading
    from lading.errors import StoreFormatError

    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\tpassage {i}\n" for i in range(50)))
    lading.build_store(src, tmp_path / "s", progress=False)
    assert main(["verify", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    _edit_meta(tmp_path / "s", count=49)
    with pytest.raises(StoreFormatError, match="49"):
        lading.open_store(tmp_path / "s")
    assert main(["verify", str(tmp_path / "s")]) == 1
    out, err = capsys.readouterr()
    assert "49" in err and "every file matches" not in out
    corpus_src = tmp_path / "t.txt"
    corpus_src.write_text("alpha beta\n\ngamma\n")
    from conftest import word_tokenizer

    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    from lading.lm import TokenCorpus

    TokenCorpus.build(corpus_src, tmp_path / "corpus", tok, progress=False)
    assert main(["verify", str(tmp_path / "corpus")]) == 0
    _edit_meta(tmp_path / "corpus", documents=3)
    with pytest.raises((StoreFormatError, ValueError)):
        TokenCorpus.open(tmp_path / "corpus")
    assert main(["verify", str(tmp_path / "corpus")]) == 1


def test_a_reused_build_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`lading build` over a store already built from the same input printed "DEST: N
    documents in 0.0s", as a fresh build does, though nothing was built."""
    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\tpassage {i}\n" for i in range(20)))
    build = ["build", str(src), str(tmp_path / "s"), "--quiet"]
    assert main(build) == 0
    first = capsys.readouterr().out
    assert ": reused" not in first and "20 documents in" in first
    assert main(build) == 0
    again = capsys.readouterr().out
    assert again.startswith(f"{tmp_path / 's'}: reused, 20 documents"), again
    assert "already built from the same input" in again and "--overwrite" in again, again
    assert main([*build, "--overwrite"]) == 0
    assert ": reused" not in capsys.readouterr().out  # rebuilt
    src.write_text("d0\tan edited source\n")
    assert main(build) == 0
    assert ": reused" not in capsys.readouterr().out  # a changed source is built again


def test_a_reused_corpus_build_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`lading lm build` printed a reused corpus as if it were built anew."""
    pytest.importorskip("tokenizers")
    from conftest import word_tokenizer, write

    src = write(tmp_path / "docs.txt", "alpha beta\n\nbeta gamma\n")
    tok = word_tokenizer(["alpha", "beta", "gamma"], tmp_path / "tok.json")
    build = ["lm", "build", str(src), str(tmp_path / "corpus"), "--tokenizer", str(tok), "--quiet"]
    assert main(build) == 0
    assert ": reused" not in capsys.readouterr().out
    assert main(build) == 0
    again = capsys.readouterr().out
    assert again.startswith(f"{tmp_path / 'corpus'}: reused, 2 documents"), again
    assert "already built from the same input" in again and "--overwrite" in again, again


def test_a_reused_stage_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`lading stage` printed "DEST: staged from SRC" over a copy it reused, copying nothing."""
    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\tpassage {i}\n" for i in range(20)))
    assert main(["build", str(src), str(tmp_path / "s"), "--quiet"]) == 0
    stage = ["stage", str(tmp_path / "s"), str(tmp_path / "local"), "--quiet"]
    assert main(stage) == 0
    assert ": reused" not in capsys.readouterr().out
    assert main(stage) == 0
    again = capsys.readouterr().out
    assert again.startswith(f"{tmp_path / 'local'}: reused"), again
    assert "already staged from the same" in again and "--verify" in again, again
    assert main([*stage, "--verify"]) == 0
    assert "every byte re-read" in capsys.readouterr().out
    (tmp_path / "local" / "meta.json").write_text("{}")  # a damaged copy is copied again
    assert main(stage) == 0
    assert ": reused" not in capsys.readouterr().out


@pytest.mark.slow  # two CLI processes, one held stopped while the other reaches the lock: ~8 s
def test_of_two_stages_at_once_one_says_it_copied_and_the_other_reused(tmp_path: Path) -> None:
    """Two processes staging at once both said "staged from" (a review, 2026-12-07): the
    second waited for the first's lock and reused its copy. The first is stopped while it
    holds the lock, so the second surely starts before the copy is published."""
    import signal
    import subprocess
    import sys
    import time

    src = tmp_path / "c.tsv"
    src.write_text("".join(f"d{i}\tpassage {i}\n" for i in range(2_000)))
    assert main(["build", str(src), str(tmp_path / "s"), "--quiet"]) == 0
    stage = [sys.executable, "-m", "lading", "stage", str(tmp_path / "s"), str(tmp_path / "l")]
    first = subprocess.Popen([*stage, "--quiet"], stdout=subprocess.PIPE, text=True)
    lock, waited = tmp_path / "l.lock", time.monotonic()
    while not lock.exists() and first.poll() is None and time.monotonic() - waited < 60:
        time.sleep(0.001)
    first.send_signal(signal.SIGSTOP)  # (may have published already: then both say reused)
    try:
        second = subprocess.Popen([*stage, "--quiet"], stdout=subprocess.PIPE, text=True)
        time.sleep(5)  # its imports, its look at the source, then the lock: held
    finally:
        first.send_signal(signal.SIGCONT)
    said = [run.communicate(timeout=120)[0] for run in (first, second)]
    assert first.returncode == 0 and second.returncode == 0
    assert ": staged from" in said[0] and ": reused" in said[1], said


def test_get_says_a_stale_store_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lading get` on a stale store printed Python's two-line warning naming lading's own
    source (stores/__init__.py:170 ... return PackedStore(...)); it says it as other commands
    say theirs: one line, ``lading get: warning: ...``, and still answers."""
    src = tmp_path / "s.tsv"
    src.write_text("1\tone\n")
    assert main(["build", str(src), str(tmp_path / "s"), "--quiet"]) == 0
    src.write_text("1\tONE\n2\tx\n")
    capsys.readouterr()
    assert main(["get", str(tmp_path / "s"), "1"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["text"] == "one"
    assert err.splitlines() == [
        f"lading get: warning: store {tmp_path / 's'} is stale: {src} is now 10 bytes, was 6 "
        "at build time"
    ], err


def test_inspect_and_verify_read_a_staged_folder_of_plain_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lading stage`` copies a folder of plain files (a parquet dataset) as well as a store;
    ``inspect`` and ``verify`` of that copy said "not a lading store ... a build makes one"
    (exit 2), where the copy has a record of every file it holds (review A of 2026-12-07).
    Now inspect says what it is and where from, and verify checks each file's size and
    CRC32 against that record, naming a damaged or missing one (exit 1)."""
    src = tmp_path / "sessions"
    (src / "day=1").mkdir(parents=True)
    (src / "day=1" / "part-0.parquet").write_bytes(b"PAR1" + bytes(range(200)) + b"PAR1")
    (src / "notes.txt").write_text("plain\n")
    (src / "meta.json").write_text('{"format": "parquet"}')  # another tool's: a plain file
    dest = tmp_path / "node" / "sessions"
    assert main(["stage", str(src), str(dest), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "staged copy of plain files" in out and f"from {src}" in out, out
    assert "files      3" in out and "1 parquet: lading.tabular.PartitionedParquet" in out, out
    assert main(["inspect", str(dest), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["kind"], info["source"], info["files"]) == ("staged files", str(src), 3)
    assert info["bytes"] == 208 + 6 + 21
    assert main(["verify", str(dest)]) == 0
    assert "every file matches its checksum" in capsys.readouterr().out
    part = dest / "day=1" / "part-0.parquet"
    data = bytearray(part.read_bytes())
    data[50] ^= 0xFF
    part.write_bytes(bytes(data))
    (dest / "notes.txt").unlink()
    assert main(["verify", str(dest)]) == 1
    err = capsys.readouterr().err
    assert f"{part}: " in err and "CRC32" in err, err
    assert f"{dest / 'notes.txt'}: missing" in err and "lading stage" in err, err
    mark_path = dest / "_lading_stage.json"  # a damaged mark: never read outside the copy
    outside = tmp_path / "node" / "outside.txt"
    outside.write_text("not the copy's")
    mark = json.loads(mark_path.read_text())
    mark["files"] = {"../outside.txt": {"size": 14, "crc32": zlib.crc32(outside.read_bytes())}}
    mark_path.write_text(json.dumps(mark))
    assert main(["verify", str(dest)]) == 1
    err = capsys.readouterr().err
    assert "its entry for '../outside.txt' is damaged" in err, err
