"""Builds the optional C helper ``lading.disk._native`` (everything else is in pyproject.toml).

``optional=True``: where no C compiler is found the install goes on without it, and lading
uses its numpy path instead (lading/disk/native.py), which gives the same answers, slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lading.disk._native",
            sources=["src/lading/disk/_native.c"],
            optional=True,
        )
    ]
)
