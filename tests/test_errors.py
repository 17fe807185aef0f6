"""Every error lading raises on purpose is a LadingError, exported from the package top."""

from __future__ import annotations

import inspect

import lading
import lading.errors


def test_every_error_is_a_lading_error_and_exported() -> None:
    errors = {
        name: cls
        for name, cls in vars(lading.errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, Exception)
        and cls.__module__ == "lading.errors"
        and not issubclass(cls, Warning)
    }
    assert len(errors) >= 7
    for name, cls in errors.items():
        assert issubclass(cls, lading.LadingError), name
        assert getattr(lading, name) is cls and name in lading.__all__, f"{name} not exported"


def test_loader_state_error_is_one_class() -> None:
    from lading.loading import LoaderStateError
    from lading.loading.state import STATE_FORMAT, STATE_VERSION, check

    assert LoaderStateError is lading.LoaderStateError
    try:
        check({"format": STATE_FORMAT, "version": STATE_VERSION, "kind": "lm"}, "map", {})
    except lading.LadingError as e:  # callers catch lading's errors with one except
        assert "lm" in str(e)
    else:
        raise AssertionError("a state of another loader kind was accepted")


def test_errors_cross_a_process_boundary_whole() -> None:
    """Ray and process pools pickle a task's exception back to the driver: a SourceError that
    does not round-trip reaches the user as Ray's UnserializableException, its file and line
    buried in a traceback, and ``except SourceError`` does not catch it."""
    import pickle

    from lading.errors import SourceError

    e = pickle.loads(pickle.dumps(SourceError("/data/a.jsonl", 7, "'text' is missing")))
    assert isinstance(e, SourceError)
    assert (e.path, e.line, e.reason) == ("/data/a.jsonl", 7, "'text' is missing")
    assert str(e) == "line 7 of /data/a.jsonl: 'text' is missing"


def test_a_manifest_of_another_format_crosses_a_process_boundary_naming_it() -> None:
    import pickle

    from lading.disk.snapshot import other_format
    from lading.errors import OtherFormatError

    e = pickle.loads(
        pickle.dumps(other_format("s3://b/c/meta.json", "lading.tokens", "lading.packed"))
    )
    assert isinstance(e, OtherFormatError) and e.found == "lading.tokens"
    assert str(e).startswith("s3://b/c is a lading token corpus, not a store")
