"""Builds the optional C helper ``lading.disk._native`` (everything else is in pyproject.toml).

``optional=True``: where no C compiler is found the install goes on without it, and lading
uses its numpy path instead (lading/disk/native.py), which gives the same answers, slower.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "src/lading/disk/_native.c"
# the build's stamp: lading.disk.native refuses a helper whose stamp is not the digest of the
# _native.c beside it (an in-place build that a pull left behind)
STAMP = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()[:16]

setup(
    ext_modules=[
        Extension(
            "lading.disk._native",
            sources=[SOURCE],
            define_macros=[("LADING_SOURCE_SHA256", f'"{STAMP}"')],
            optional=True,
        )
    ]
)
