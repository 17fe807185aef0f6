"""Shared fixtures: tiny corpora written inline, and the real collections in ../shared/data."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from lading.lm import TokenCorpus
    from lading.testing import LocalS3

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"  # helper modules and the job scripts tests launch live here
# One seed per test session for the randomised tests that are not hypothesis's (kill moments,
# fault injection): fresh each run so faults land somewhere new, printed so a red run replays.
SEED = int(os.environ.get("LADING_TEST_SEED") or random.SystemRandom().randrange(2**32))
# Deadline tests against the local S3. A healthy call must be answered within one attempt's
# limit, whatever the machine's load: a GET through the proxy takes ~0.1 s idle and took over
# 0.5 s at a load of 12-18 on 2 cores, so an attempt that must succeed gets 5 s. A limit below
# that is for attempts that all meet a fault (the first call hangs: nothing has to answer in
# time). LOADED is what a loaded machine may add to any bound on a call's time (scheduling, the
# backoff, the proxy's latency, a client starting); a call without its deadline would still
# exceed it (obstore waits 30 s an attempt, s3fs for ever).
HEALTHY_S = 5.0
LOADED_S = 10.0
# No test is timed (speed lives in benchmarks/): hypothesis's default deadline of 200 ms an
# example failed a property test that took 304 ms once on this 2-core machine under load.
settings.register_profile("lading", deadline=None)
settings.load_profile("lading")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the real collections (``data_dir``) is end to end: out of the unit tier."""
    for item in items:
        if "data_dir" in getattr(item, "fixturenames", ()) or item.get_closest_marker("data"):
            item.add_marker(pytest.mark.e2e)


E2E_MODULE = "pytestmark = pytest.mark.e2e"  # a module whose every test is end to end


def _marked(marks: set[str]) -> Callable[..., bool]:
    """pytest's matcher for a test carrying exactly ``marks``."""
    return lambda name, /, **_: name in marks


def _selects_some_e2e(markexpr: str) -> bool:
    """Whether ``-m markexpr`` can select a test marked e2e (whatever else it is marked)."""
    if not markexpr:
        return True
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(markexpr)
        others = ("slow", "data")
        for bits in range(1 << len(others)):
            marks = {"e2e", *(m for i, m in enumerate(others) if bits >> i & 1)}
            if expression.evaluate(_marked(marks)):
                return True
        return False
    except Exception:  # pytest's private parser moved: collect as usual
        return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Where ``-m`` leaves out e2e (the unit tier), a module whose every test is e2e is not
    even imported: the framework modules those import (sentence-transformers, datasets,
    PyTerrier: ~4 s) were most of the unit tier's collection. Same selection, less import."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if _selects_some_e2e(config.getoption("markexpr", "") or ""):
        return None
    head = collection_path.read_text(encoding="utf-8", errors="replace")[:4000]
    return True if E2E_MODULE in head else None


def pytest_report_header() -> str:
    return (
        f"lading test seed: {SEED} (replay: LADING_TEST_SEED={SEED}; "
        "hypothesis tests replay with --hypothesis-seed=N and print failing examples)"
    )


def distinct_ids(longest: int = 40, most: int = 200) -> Any:
    """A hypothesis strategy: 1 to ``most`` distinct ids of 1 to ``longest`` characters, any
    Unicode a source accepts (no NUL, no lone surrogate)."""
    from hypothesis import strategies as st

    characters = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    return st.lists(
        st.text(characters, min_size=1, max_size=longest), min_size=1, max_size=most, unique=True
    )


@pytest.fixture(params=["c", "numpy"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on both lookup routes: the C helper (skipped where it is not built) and
    numpy. Stores and indexes opened in the test take this one (objects read
    ``native.NATIVE`` when made). A module may define its own ``route`` (test_bulk.py does)."""
    from lading.disk import native

    helper = native.load() if request.param == "c" else None
    if request.param == "c" and helper is None:
        pytest.skip(
            "the C helper is not built here (pip install -e . or python setup.py build_ext "
            "--inplace) or LADING_NATIVE=0"
        )
    monkeypatch.setattr(native, "NATIVE", helper)
    return str(request.param)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A generator seeded from the session seed and the test's name; the seed is printed."""
    seed = f"{SEED}:{request.node.nodeid}"
    print(f"random seed: LADING_TEST_SEED={SEED} ({request.node.nodeid})")
    return random.Random(seed)


def shared_data() -> Path | None:
    """The real data folder: $LADING_DATA, else ../shared/data beside the repository."""
    env = os.environ.get("LADING_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture
def data_dir() -> Path:
    """The real data folder, or a skip saying where it was looked for."""
    found = shared_data()
    if found is None:
        pytest.skip("real data not found: set LADING_DATA or put it at ../shared/data")
    return found


def write(path: Path, content: str | bytes) -> Path:
    """Write text (UTF-8, no newline translation) or bytes to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def wait_child(pid: int, timeout: float = 60.0) -> int:
    """The exit code of forked child ``pid``, waited for at most ``timeout`` seconds: a child
    still running then is hung; it is sent SIGABRT (the faulthandler pytest enabled, inherited,
    prints where it waits on stderr), reaped, and the test fails saying so (a bare ``waitpid``
    on a hung child held a CI run until its 90 minutes were out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGABRT)
    time.sleep(2.0)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child {pid} was still running after {timeout:.0f} s: hung")


@pytest.fixture
def tiny_tsv(tmp_path: Path) -> Path:
    """Five passages with integer ids, one with non-ASCII text, one empty."""
    return write(
        tmp_path / "collection.tsv",
        "".join(
            f"{i}\t{text}\n"
            for i, text in [
                (0, "the quick brown fox"),
                (1, "café crème, naïve façade — ünïcödé ✓"),
                (2, ""),
                (3, "jumps over the lazy dog"),
                (7, "seven"),
            ]
        ),
    )


def files_open_under(folder: Path) -> list[str]:
    """The files this process holds open below ``folder`` (deleted ones too), by path."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


def word_tokenizer(words: list[str], path: Path) -> Path:
    """A word-level tokenizer over ``words`` plus an end-of-text token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<|endoftext|>": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def word_corpus(
    folder: Path, *, docs: int, lengths: tuple[int, int], words: int, seed: int
) -> TokenCorpus:
    """A token corpus built in ``folder`` from ``docs`` documents of random words ``w0 ...``
    (``words`` of them; word ``w_i`` has id ``i + 2``, so tokens are easy to check), each
    ``lengths[0]`` to ``lengths[1] - 1`` words long, drawn from numpy's generator at ``seed``."""
    import numpy as np

    from lading.lm import TokenCorpus

    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(words)]
    texts = [" ".join(rng.choice(vocab, int(rng.integers(*lengths)))) for _ in range(docs)]
    src = write(folder / "docs.txt", "\n\n".join(texts) + "\n")
    tokenizer = word_tokenizer(vocab, folder / "t.json")
    return TokenCorpus.build(src, folder / "corpus", tokenizer, progress=False)


def store_file(directory: Path, name: str) -> Path:
    """The file of the current snapshot of a lading directory whose name is ``name``
    (``text.bin``: the first shard's), as its ``meta.json`` lists it."""
    files = json.loads((directory / "meta.json").read_text())["files"]
    found = sorted(f for f in files if f == name or f.endswith("/" + name))
    assert found, f"{directory} lists no {name}: {sorted(files)}"
    return directory / found[0]


def log_reliability(record: dict[str, object]) -> None:
    """Append ``record`` to $LADING_RELIABILITY_LOG, where benchmarks/reliability.py counts
    what the fault tests tried; nothing when it is unset (the default test run)."""
    log = os.environ.get("LADING_RELIABILITY_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")


@pytest.fixture(scope="session")
def readme_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder made by ``python -m lading example``, once per session: what README's
    examples read (copy it before writing; see tests/readme_blocks.py)."""
    from readme_blocks import make_example

    return make_example(tmp_path_factory.mktemp("readme") / "example")


_s3_buckets = iter(range(1 << 30))


@pytest.fixture(scope="session")
def s3() -> Iterator[LocalS3]:
    """A local S3 for the remote-store tests (moto behind a proxy adding 30 ms ± 10 a request,
    counting GETs, injecting faults; see lading.testing.localserver), one a session."""
    pytest.importorskip("moto.server", reason="the local S3 needs moto: pip install 'moto[server]'")
    pytest.importorskip("aiohttp", reason="the local S3's proxy needs aiohttp")
    from lading.testing import LocalS3

    with LocalS3(latency=0.03, jitter=0.01) as server:
        yield server


@pytest.fixture
def bucket(s3: LocalS3) -> str:
    """A fresh bucket on the local S3; the proxy's counters and faults are reset."""
    name = f"bucket-{next(_s3_buckets)}"
    s3.make_bucket(name)
    s3.reset()
    return name


@pytest.fixture(scope="session", autouse=True)
def _one_temp_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every temporary folder the tests' processes make goes under one folder of this session
    (``$TMPDIR``, inherited by every child), removed at its end: torchrun never removes its
    ``torchelastic_*`` folders and a killed process leaves multiprocessing's ``pymp-*`` (351
    and 128 piled up in the machine's temp in a day of test runs). pytest's own ``tmp_path``
    folders are placed first, outside it, so a failed test's files are kept as usual."""
    tmp_path_factory.getbasetemp()
    multiprocessing.util.get_temp_dir()  # this process's: outside too, its exit hook removes it
    folder = tempfile.mkdtemp(prefix="lading-tests-")
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # read $TMPDIR again
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None
        shutil.rmtree(folder, ignore_errors=True)


_START_METHOD = multiprocessing.get_start_method(allow_none=True)  # the process's, at start


@pytest.fixture(autouse=True)
def _keep_the_start_method() -> Iterator[None]:
    """Put multiprocessing's default start method back to the session's after each test: a
    library a test drives may set it for the whole process (the HF datasets peer of the bench
    leaves ``spawn``, from a module fixture), and every later test whose DataLoader workers
    run a local class then fails to pickle it (test_plan's worker test, only in the full
    run's order)."""
    yield
    if multiprocessing.get_start_method(allow_none=True) != _START_METHOD:
        multiprocessing.set_start_method(_START_METHOD, force=True)


def node_cache_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: str) -> Path:
    """A cold node cache where the environment says (``$LADING_CACHE``), capped at ``cap``
    (``$LADING_REMOTE_CACHE_BYTES``): what a training command given a URL reads through."""
    monkeypatch.setenv("LADING_CACHE", str(tmp_path / "lading-cache"))
    monkeypatch.setenv("LADING_REMOTE_CACHE_BYTES", cap)
    return tmp_path / "lading-cache" / "remote"


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op torch thread: two runs of the same batches give the same losses bit for
    bit (tests/lm/test_lm_train.py saw 2 threads differ in the last bits under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def kept_model(out: Path, summary: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """``out/model`` as a training run keeps it (weights, config, meta.json last), checked
    against the run's summary; the folder and its config."""
    import json

    folder = out / "model"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "meta.json",
        "model.safetensors",
    ]
    assert summary["model_dir"] == str(folder)
    return folder, json.loads((folder / "config.json").read_text())


RERANK_WORDS = [f"w{i}" for i in range(40)]


def tiny_reranker(tmp: Path) -> dict[str, Any]:
    """A store of 12 documents of :data:`RERANK_WORDS`, a WordPiece tokenizer trained on them
    (``tok.json``) and a 2-layer BERT cross-encoder, in ``tmp`` (``tmp`` itself under "tmp")."""
    import lading
    from lading.ir.model import CrossEncoder, tiny_bert_config
    from lading.stores.tokens import save_tokenizer, train_tokenizer

    words = RERANK_WORDS
    texts = [" ".join(words[(i * 7 + j) % 40] for j in range(20)) for i in range(12)]
    docs = write(tmp / "docs.tsv", "".join(f"d{i}\t{t}\n" for i, t in enumerate(texts)))
    tokenizer = save_tokenizer(train_tokenizer(texts, "wordpiece", 200), tmp / "tok.json")
    store = lading.build_store(docs, tmp / "store", progress=False)
    model = CrossEncoder.from_config(tiny_bert_config(200, 128))
    return {"store": store, "tokenizer": tokenizer, "model": model, "tmp": tmp}
