"""What ``cache=`` (and ``$LADING_CACHE``) names: never the current folder by accident."""

from __future__ import annotations

from pathlib import Path

import pytest

from lading.remote.settings import RemoteSettings


def test_an_empty_cache_path_is_refused_not_the_current_folder(tmp_path: Path) -> None:
    """``open_store(url, cache="")`` wrote ``blocks.data``, ``ledger.sqlite``, ``owners/`` and
    ``stores/`` into the current folder, where ``LADING_CACHE=""`` meant the default (a
    review's repro)."""
    for empty in ("", "  "):
        with pytest.raises(ValueError, match=r"cache='\s*': an empty path .* leave cache out"):
            RemoteSettings.of(empty, "1M")


def test_a_cache_path_starting_with_a_tilde_is_the_home_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cache="~/x"`` and ``LADING_CACHE='~/x'`` each made a folder named ``~`` in the
    current folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert RemoteSettings.of("~/x", "1M").cache == tmp_path / "home" / "x"
    monkeypatch.setenv("LADING_CACHE", "~/y")
    assert RemoteSettings.of(None, "1M").cache == tmp_path / "home" / "y" / "remote"
    assert not (tmp_path / "~").exists()
