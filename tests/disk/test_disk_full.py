"""A full disk or a file size limit during a build: one clear line, and nothing half-built.

The file size limit (``RLIMIT_FSIZE``, as ``ulimit -f``) works for any user; a real full
filesystem is a small tmpfs, mounted where this process may mount (root in a container).
"""

from __future__ import annotations

import contextlib
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import word_tokenizer, write

pytest.importorskip("tokenizers")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.slow  # a full disk, a file size limit, in subprocesses (~40 s)


def limit_file_size(limit: int) -> None:
    """In the child before exec: writes past ``limit`` bytes fail with EFBIG, no signal."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def sources(root: Path, tool: str) -> dict[int, list[str]]:
    """Arguments of a small build (1) and of one too big for the space (2) with ``tool``."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]

    def text(n: int) -> str:
        return " ".join(rng.choice(words, n))

    out = {}
    for version, scale in ((1, 1), (2, 200)):
        if tool == "build":
            lines = "".join(f"p{i}\t{text(50)}\n" for i in range(200 * scale))
            out[version] = ["build", str(write(root / f"p{version}.tsv", lines))]
        elif tool == "lm":
            docs = "\n\n".join(text(100) for _ in range(100 * scale)) + "\n"
            src, tok = write(root / f"t{version}.txt", docs), root / "tok.json"
            word_tokenizer(words, tok)
            out[version] = ["lm", "build", str(src), "--tokenizer", str(tok), "--quiet"]
        else:
            path = root / f"s{version}.parquet"
            values = rng.integers(0, 2**62, 500 * scale * 6)
            pq.write_table(pa.table({"x": pa.array(values, pa.int64())}), path)
            out[version] = ["repartition", str(path)]
    return out


def run(args: list[str], dest: Path, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lading", *args[:-1], args[-1], str(dest)]
    if args[:2] == ["lm", "build"]:  # options after the positionals
        command = [sys.executable, "-m", "lading", *args[:3], str(dest), *args[3:]]
    preexec = (lambda: limit_file_size(limit)) if limit is not None else None
    return subprocess.run(command, capture_output=True, text=True, preexec_fn=preexec)


def check_refused(done: subprocess.CompletedProcess[str], dest: Path, words: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.replace("\r", "\n").splitlines()
    message = [line for line in lines if line.strip() and not line.startswith("building ")]
    assert len(message) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert message[0].startswith("lading ")
    names = ("text.bin", "tokens.bin", "part-0.parquet")
    assert any(f"({name}" in message[0] for name in names), message[0]
    assert words in message[0] and str(dest) in message[0] and "was left as it was" in message[0]
    leftovers = [p.name for p in dest.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def still_version_one(dest: Path, tool: str) -> None:
    from lading.disk import verify_checksums

    if tool == "repartition":
        assert pq.read_table(dest).num_rows == 3000
    else:
        assert verify_checksums(dest) == []


@pytest.mark.parametrize("tool", ["build", "lm", "repartition"])
def test_file_size_limit(tmp_path: Path, tool: str) -> None:
    args = sources(tmp_path, tool)
    dest = tmp_path / "out" / "dest"
    assert run(args[1], dest).returncode == 0
    check_refused(run(args[2], dest, limit=1 << 20), dest, "file size limit")
    still_version_one(dest, tool)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the file size "
                    "limit test covers the same path")  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.parametrize("tool", ["build", "lm", "repartition"])
def test_full_filesystem(tmp_path: Path, tool: str) -> None:
    args = sources(tmp_path, tool)
    with small_tmpfs(tmp_path / "mnt", "3m") as mnt:
        dest = mnt / "dest"
        assert run(args[1], dest).returncode == 0
        check_refused(run(args[2], dest), dest, "filesystem is full")
        still_version_one(dest, tool)
        import lading
        from lading.errors import OutOfSpaceError

        if tool == "build":  # the Python API raises an OSError with the errno
            with pytest.raises(OutOfSpaceError, match="filesystem is full") as caught:
                lading.build_store(args[2][1], dest, progress=False)
            assert caught.value.errno == 28


_SAVE_TWICE = """
import sys, torch
from lading import OffsetStore
from lading.train import checkpoint
root = sys.argv[1]
if sys.argv[2] == "checkpoint":
    checkpoint.save({"step": 1, "w": torch.ones(16)}, root + "/ckpt")
    checkpoint.save({"step": 2, "w": torch.zeros(1 << 19)}, root + "/ckpt")  # 2 MiB: too big
else:
    OffsetStore.build(root + "/small.tsv", root + "/index")
    OffsetStore.build(root + "/big.tsv", root + "/index")
"""


@pytest.mark.parametrize("kind", ["checkpoint", "offsets"])
def test_checkpoint_and_offset_index_past_the_file_size_limit(tmp_path: Path, kind: str) -> None:
    """Every atomic build goes through the one scratch step: a checkpoint or an offset index
    that runs out of space is an OutOfSpaceError naming the cause, and the last good one stays."""
    write(tmp_path / "small.tsv", "".join(f"{i}\tdoc {i}\n" for i in range(10)))
    write(tmp_path / "big.tsv", "".join(f"{i}\tdoc {i}\n" for i in range(300_000)))
    done = subprocess.run(
        [sys.executable, "-c", _SAVE_TWICE, str(tmp_path), kind],
        capture_output=True,
        text=True,
        preexec_fn=lambda: limit_file_size(1 << 20),
    )
    assert done.returncode != 0
    assert "OutOfSpaceError" in done.stderr and "file size limit" in done.stderr, done.stderr
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    if kind == "checkpoint":
        from lading.train import checkpoint

        kept = checkpoint.load(tmp_path / "ckpt")
        assert kept["step"] == 1 and kept["w"].tolist() == [1.0] * 16
    else:
        from lading import OffsetStore

        assert len(OffsetStore(tmp_path / "index")) == 10
