"""The C helper (lading.disk._native) itself: what it does with parameters and files that do not
fit together. lading checks the files before it calls the helper, so these call it directly: the
helper must refuse, never read outside a buffer. A call that could crash runs in a subprocess,
so a crash fails one test instead of ending the run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
