"""The C helper (lading.disk._native) itself: what it does with parameters and files that do not
fit together. lading checks the files before it calls the helper, so these call it directly: the
helper must refuse, never read outside a buffer. A call that could crash runs in a subprocess,
so a crash fails one test instead of ending the run."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import types
from pathlib import Path

import pytest

from lading.disk import native

HELPER = native.load()
needs_helper = pytest.mark.skipif(
    HELPER is None, reason="the C helper is not built here (python setup.py build_ext --inplace)"
)


def run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with this checkout's lading (a crash is its rc)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    prelude = "import numpy as np\nfrom lading.disk import native\nC = native.load()\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@needs_helper
@pytest.mark.parametrize(
    ("buckets", "max_spill"), [(2**58, 3), (2**59 + 1, 0), (2**62, 1), (1, 2), (1, 2**62)]
)
def test_a_hash_meta_that_does_not_fit_the_table_is_refused(buckets: int, max_spill: int) -> None:
    # buckets * 64 wrapped past 2**64 and passed the size check: the lookup read far outside
    # the 64-byte table (SIGSEGV); a spill past every bucket went round the table for ever
    done = run_isolated(
        f"""
        table, keys = np.full(8, 1 << 32 | 1, np.uint64), np.zeros(1, np.uint64)
        try:
            C.hash_rows(["a", "b", "zz" * 3], table, keys, 8, {buckets}, {max_spill},
                        np.ones(8, np.uint64))
        except C.Damaged as e:
            print("refused:", e)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: hash index: table or width does not match its meta" in done.stdout


def test_a_helper_built_from_another_source_is_not_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the in-place .so of an editable install outlives a pull that changes _native.c: it was
    # used as it was (old rules, or an AttributeError from a missing function at import)
    stale = types.ModuleType("lading.disk._native")
    stale.SOURCE_SHA256 = "0" * 16  # type: ignore[attr-defined]
    stale.configure = lambda integer: None  # type: ignore[attr-defined]
    monkeypatch.setattr(native.importlib, "import_module", lambda name: stale)
    with caplog.at_level(logging.DEBUG, logger="lading.disk.native"):
        assert native.load() is None
    assert "built from another _native.c" in caplog.text and "build_ext --inplace" in caplog.text
    del stale.SOURCE_SHA256  # built some other way: no stamp at all
    assert native.load() is None


@needs_helper
def test_the_helper_built_here_is_from_this_source() -> None:
    source = Path(native.__file__).with_name("_native.c").read_bytes()
    built = getattr(HELPER, "SOURCE_SHA256", None)
    assert built == hashlib.sha256(source).hexdigest()[:16], "rebuild: build_ext --inplace"


def test_a_helper_that_cannot_be_loaded_leaves_the_numpy_route(tmp_path: Path) -> None:
    # a .so for another Python or machine, or a broken one: an ImportError, said in the log
    shutil.copytree(Path(native.__file__).parents[1], tmp_path / "lading")
    so = tmp_path / "lading" / "disk" / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    so.write_bytes(b"not an ELF file")
    code = (
        "import logging; logging.basicConfig(level=logging.DEBUG)\n"
        "import lading; from lading.disk import native\n"
        "print('route:', native.NATIVE, lading.__file__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"route: None {tmp_path}" in done.stdout
    assert "lading.disk._native is not used" in done.stderr and "numpy route" in done.stderr
