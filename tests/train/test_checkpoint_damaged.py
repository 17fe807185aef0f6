"""A checkpoint whose ``state.json`` is damaged (or written by hand) is refused on load with one
ValueError naming the file, what is wrong and the fix, never a bare KeyError or TypeError, and
never read as other state (two int keys that are one number, a key Python's ``int`` reads
loosely)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from lading.train import checkpoint  # noqa: E402 - after the skips

Edit = Callable[[dict[str, Any]], None]


def _saved(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    where = tmp_path / "ckpt"
    state = {"model": {"w": torch.ones(2)}, "optim": {0: {"step": 1}, 1: {"step": 2}}}
    checkpoint.save(state, where)
    return where, json.loads((where / "state.json").read_text())


def _damaged(tmp_path: Path, edit: Edit) -> Path:
    where, state = _saved(tmp_path)
    edit(state)
    (where / "state.json").write_text(json.dumps(state))
    return where


def _refused(where: Path, what: str) -> None:
    with pytest.raises(ValueError) as raised:
        checkpoint.load(where)
    message = str(raised.value)
    assert message.startswith(f"{where / 'state.json'}: "), message
    assert len(message) < 600, message  # a 5,000-digit key is not repeated whole
    assert what in message, message
    assert "resume from another checkpoint" in message and f"delete {where}" in message, message


def _set(path: list[str], value: Any) -> Edit:
    def edit(state: dict[str, Any]) -> None:
        for key in path[:-1]:
            state = state[key]
        state[path[-1]] = value

    return edit


INT_KEYS = ["optim", "__int_keys__"]


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (_set(["model", "w", "__tensor__"], "t9"), "tensor 't9', which tensors.safetensors"),
        (_set(["model", "w", "__tensor__"], [1]), "a tensor reference must be a name"),
        (_set([*INT_KEYS, "9" * 5000], {}), "not an integer key"),
        (_set([*INT_KEYS, "01"], {"step": 99}), "'01' is not an integer key"),
        (_set([*INT_KEYS, " 1_0 "], {"step": 5}), "' 1_0 ' is not an integer key"),
        (_set([*INT_KEYS, "-0"], {}), "'-0' is not an integer key"),
        (_set(INT_KEYS, [1, 2]), "must be an object"),
        (_set(["optim"], {"__tuple__": {"a": 1}}), "must be a list"),
        (_set(["model", "w", "extra"], 1), "beside other keys"),
    ],
    ids=["missing", "list", "giant", "01", "1_0", "-0", "int-keys-list", "tuple-dict", "extra"],
)
def test_a_damaged_state_json_is_refused_naming_it(tmp_path: Path, edit: Edit, what: str) -> None:
    _refused(_damaged(tmp_path, edit), what)


def test_the_refusal_says_where_in_the_state(tmp_path: Path) -> None:
    where = _damaged(tmp_path, _set([*INT_KEYS, "01"], {"step": 99}))
    with pytest.raises(ValueError, match=r"at optim\['01'\]"):
        checkpoint.load(where)
    where = _damaged(tmp_path / "b", _set(["model", "w", "__tensor__"], "t9"))
    with pytest.raises(ValueError, match=r"at model\['w'\]"):
        checkpoint.load(where)
    where = _damaged(tmp_path / "c", _set([*INT_KEYS, "1", "__tensor__"], "t7"))
    with pytest.raises(ValueError, match=r"at optim\[1\]; "):  # the key as loaded: an int
        checkpoint.load(where)


def test_a_state_json_that_is_not_json_or_nests_too_deep_is_refused(tmp_path: Path) -> None:
    where, _ = _saved(tmp_path)
    (where / "state.json").write_text('{"model": ')
    _refused(where, "not JSON")
    (where / "state.json").write_text("[1]")
    _refused(where, "holds a list, not an object")
    (where / "state.json").write_text('{"a": 1, "a": 2}')
    _refused(where, "'a' twice")
    (where / "state.json").write_text("[" * 100_000 + "]" * 100_000)
    _refused(where, "nested too deep")


def test_negative_and_large_int_keys_still_load(tmp_path: Path) -> None:
    state = {"k": {-3: "a", 0: "b", 10**30: "c"}}
    checkpoint.save(state, tmp_path / "ckpt")
    assert checkpoint.load(tmp_path / "ckpt") == state


def test_bool_keys_are_refused_on_save(tmp_path: Path) -> None:
    # JSON wrote True as "True", which no load could read back as an int
    with pytest.raises(TypeError, match="str or int"):
        checkpoint.save({"k": {True: 1}}, tmp_path / "ckpt")


def test_every_file_of_a_checkpoint_is_on_disk_before_it_replaces_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file of a new checkpoint is fsynced before the publish that removes the previous
    one (none was: after a power loss the new one could hold empty files, the old one gone)."""
    import os

    where = tmp_path / "ckpt"
    checkpoint.save({"step": 1, "w": torch.ones(3)}, where)
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    checkpoint.save({"step": 2, "w": torch.ones(3) * 2}, where)
    files = {Path(s).name for s in synced if not os.path.isdir(s)}
    assert files >= {"tensors.safetensors", "state.json", "meta.json"}


@pytest.mark.parametrize("damage", ["zeroed", "cut", "grown"])
def test_a_tensor_file_damaged_on_disk_is_refused_naming_it(tmp_path: Path, damage: str) -> None:
    """Bytes of ``tensors.safetensors`` zeroed on disk loaded, and training went on from
    zeros (a review: 5,000 of an embedding's weights); a file cut short raised safetensors'
    own ``SafetensorError: incomplete metadata``. Its size and CRC32 are in ``meta.json`` now,
    checked on load: one ValueError naming the file and the fix."""
    where = tmp_path / "ckpt"
    checkpoint.save({"model": {"w": torch.arange(4096, dtype=torch.float32)}}, where)
    path = where / "tensors.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "zeroed":
        data[-4000:-2000] = bytes(2000)
    elif damage == "cut":
        data = data[: len(data) // 2]
    else:
        data += b"x"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as raised:
        checkpoint.load(where)
    message = str(raised.value)
    assert message.startswith(f"{path}: "), message
    said = "CRC32 is not the one meta.json records" if damage == "zeroed" else "bytes, meta.json"
    assert said in message and "resume from another checkpoint" in message, message


def test_a_checkpoint_written_before_the_record_still_loads(tmp_path: Path) -> None:
    """``meta.json`` without the files' record (a checkpoint of an earlier lading) loads as
    before: nothing to compare."""
    where = tmp_path / "ckpt"
    checkpoint.save({"w": torch.ones(3)}, where)
    meta = json.loads((where / "meta.json").read_text())
    del meta["files"]
    (where / "meta.json").write_text(json.dumps(meta))
    assert torch.equal(checkpoint.load(where)["w"], torch.ones(3))


@pytest.mark.parametrize("name", ["../outside.bin", "/etc/hostname", "..", "sub/x"])
def test_a_meta_json_naming_a_file_outside_the_folder_is_refused_unread(
    tmp_path: Path, name: str
) -> None:
    """``meta.json``'s record of files is read from disk: a crafted one naming ``../`` or an
    absolute path had the check read (and CRC) a file outside the checkpoint. Refused, the
    file unread."""
    where = tmp_path / "ckpt"
    checkpoint.save({"w": torch.ones(3)}, where)
    meta = json.loads((where / "meta.json").read_text())
    meta["files"] = {name: {"size": 1, "crc32": 0}}
    (where / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"not a file of this folder"):
        checkpoint.load(where)
