"""Checkpoints without pickle: tensors in safetensors, everything else in JSON.

Training state (model, optimizer, scheduler, loader position, RNG states) is a nest of dicts,
lists, numbers, strings and tensors. :func:`save` writes the tensors to ``tensors.safetensors``
and the rest to ``state.json`` with each tensor replaced by a reference, then renames the
directory into place, so a crash mid-save leaves the previous checkpoint intact. Integer dict
keys (optimizer state is keyed by parameter index) survive the trip through JSON.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from lading.disk import (
    build_lock,
    check_version,
    current_version,
    left_aside,
    publish,
    remove_dead_temps,
    scratch,
    write_file,
)
from lading.disk.snapshot import file_crc32
from lading.errors import missing_package

FORMAT_NAME = "lading.train.checkpoint"
_TENSOR = "__tensor__"
_INT_KEYS = "__int_keys__"
_TUPLE = "__tuple__"


def _flatten(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = f"t{len(tensors)}"
        # a copy of its own: tied weights share storage, which safetensors refuses to write
        tensors[key] = value.detach().cpu().clone().contiguous()
        return {_TENSOR: key}
    if isinstance(value, dict):
        # bool is an int, but JSON would write True as "True", which no load reads back
        if value and all(isinstance(k, int) and not isinstance(k, bool) for k in value):
            return {_INT_KEYS: {str(int(k)): _flatten(v, tensors) for k, v in value.items()}}
        if not all(isinstance(k, str) for k in value):
            raise TypeError(
                f"checkpoint dict keys must be str or int (not bool), found {list(value)[:3]}"
            )
        return {k: _flatten(v, tensors) for k, v in value.items()}
    if isinstance(value, tuple):
        return {_TUPLE: [_flatten(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_flatten(v, tensors) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot checkpoint a {type(value).__name__} without pickle")


class _DamagedError(Exception):
    """What is wrong in ``state.json``; :attr:`where` gathers the keys leading to it as the
    exception passes out through :func:`_inside` (innermost first)."""

    def __init__(self, what: str, *where: str | int) -> None:
        super().__init__(what)
        self.what = what
        self.where: list[str | int] = list(where)

    def place(self) -> str:
        """Where in the state it is, as Python would index the loaded state."""
        keys = self.where[::-1]
        if not keys:
            return "the top"
        shown = [repr(k) if len(repr(k)) <= 42 else f"{repr(k)[:40]}..." for k in keys]
        short = isinstance(keys[0], str) and len(keys[0]) <= 40
        head = shown[0][1:-1] if short else f"[{shown[0]}]"
        return f"{head}{''.join(f'[{k}]' for k in shown[1:])}"


def _restore(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The state :func:`_flatten` made ``value`` from: every marker checked, since the file is
    input (a bare ``KeyError: 't9'`` or ``unhashable type`` said nothing of which file).

    Raises:
        _DamagedError: a marker is malformed, a tensor is not in ``tensors``, an int key is not
            one ``save`` writes (``str(int(k)) == k``: ``"01"`` would become key 1 beside
            ``"1"``, the later silently winning; ``int`` also reads ``" 1_0 "`` as 10).
    """
    if isinstance(value, dict):
        marker = _TENSOR if _TENSOR in value else _INT_KEYS if _INT_KEYS in value else None
        marker = _TUPLE if marker is None and _TUPLE in value else marker
        if marker is not None and len(value) != 1:
            raise _DamagedError(f"{marker} beside other keys ({sorted(value)[:4]})")
        if marker == _TENSOR:
            return _tensor(value[_TENSOR], tensors)
        if marker == _INT_KEYS:
            keys = value[_INT_KEYS]
            if not isinstance(keys, dict):
                raise _DamagedError(f"{_INT_KEYS} must be an object, not a {type(keys).__name__}")
            numbered = ((_int_key(k), v) for k, v in keys.items())
            return {n: _inside(n, v, tensors) for n, v in numbered}
        if marker == _TUPLE:
            items = value[_TUPLE]
            if not isinstance(items, list):
                raise _DamagedError(f"{_TUPLE} must be a list, not a {type(items).__name__}")
            return tuple(_inside(i, v, tensors) for i, v in enumerate(items))
        return {k: _inside(k, v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_inside(i, v, tensors) for i, v in enumerate(value)]
    return value


def _inside(key: str | int, value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """:func:`_restore` of the item ``key`` of a container, naming ``key`` in its error."""
    try:
        return _restore(value, tensors)
    except _DamagedError as e:
        e.where.append(key)
        raise


def _tensor(name: Any, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    if not isinstance(name, str):
        raise _DamagedError(f"a tensor reference must be a name, not {repr(name)[:40]}")
    if name not in tensors:
        raise _DamagedError(
            f"it names tensor {name[:40]!r}, which tensors.safetensors does not hold "
            f"({len(tensors)} tensors)"
        )
    return tensors[name]


def _int_key(key: str) -> int:
    """``key`` as :func:`_flatten` wrote it (``str`` of an int), else refused."""
    try:
        number = int(key)
    except ValueError:  # not a number, or more digits than int() reads (4,300)
        number = None
    if number is None or str(number) != key:
        raise _DamagedError(
            f"{key[:40]!r}{'...' if len(key) > 40 else ''} is not an integer key as a save "
            "writes them (decimal digits, no sign but '-', no leading zeros)",
            key,
        )
    return number


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refused where a key repeats (``json`` keeps the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DamagedError(f"an object holds the key {key[:40]!r} twice")
            seen.add(key)
    return out


def save(state: dict[str, Any], directory: str | os.PathLike[str]) -> None:
    """Write ``state`` to the checkpoint directory ``directory`` (atomically replaced).

    Under ``directory``'s build lock, as every build: what saves killed before left beside it
    (a full-size ``checkpoint.tmp-<pid>-*``; a checkpoint a publish renamed aside) is swept or
    put back first (:func:`lading.disk.remove_dead_temps`), a live process's left alone.
    """
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _flatten(state, tensors)
    meta = {"format": FORMAT_NAME, "version": current_version(FORMAT_NAME)}
    publish_tensors(
        Path(directory), tensors, "tensors.safetensors", {"state.json": json.dumps(skeleton)}, meta
    )


def publish_tensors(
    dest: Path,
    tensors: dict[str, torch.Tensor],
    tensor_file: str,
    texts: dict[str, str],
    meta: dict[str, Any],
) -> None:
    """Replace the folder ``dest`` with ``tensors`` (safetensors, as ``tensor_file``), each
    text of ``texts`` by its file name and ``meta.json`` last (``meta`` and the tensor file's
    size and CRC32, which :func:`check_files` checks; the JSON files are checked as they are
    read, and may be edited by hand), every file fsynced, published
    under ``dest``'s build lock: what writes killed before left beside it is swept or put back
    first (:func:`lading.disk.remove_dead_temps`), a live process's left alone, and a write
    killed midway leaves the previous folder (or none), never a part that loads."""
    dest.parent.mkdir(parents=True, exist_ok=True)  # for the lock
    with build_lock(dest):
        remove_dead_temps(dest)
        with scratch(dest) as tmp:  # a full disk: OutOfSpaceError, the old folder kept
            _save_tensors(tensors, tmp / tensor_file)
            for name, text in texts.items():
                write_file(tmp / name, text.encode())
            files = {tensor_file: _record(tmp / tensor_file)}  # (the JSON: checked as read)
            write_file(tmp / "meta.json", json.dumps({**meta, FILES: files}).encode())
            publish(tmp, dest)  # every file on disk first: the publish removes the previous one


def recover(directory: str | os.PathLike[str]) -> None:
    """Put back the checkpoint ``directory`` where a save was killed between the two renames
    of its publish (no atomic exchange: NFS), which leave no ``directory``, only the previous
    checkpoint and the new one beside it (:func:`lading.disk.recover_aside`: the new one where
    its ``meta.json``, written last, is there). Nothing to do (and no lock taken) otherwise.

    Raises:
        FileExistsError: a checkpoint is still aside (its process is alive on this host, or
            several are): named, rather than a resume from step 0 that would ignore it.
    """
    dest = Path(directory)
    if dest.exists() or not left_aside(dest):
        return
    with build_lock(dest):
        remove_dead_temps(dest)  # puts the complete copy back first, then sweeps the rest
    left = [] if dest.exists() else left_aside(dest)
    if left:
        raise FileExistsError(
            f"{dest} is missing but a save that did not finish left "
            f"{', '.join(p.name for p in left)} beside it, and the process named in it "
            f"(pid after '.old-') is still running on this host. Stop it, or rename the "
            f"checkpoint to keep to {dest.name}, then resume."
        )


def refuse_a_fresh_run_over(directory: str | os.PathLike[str], out: Path) -> None:
    """Refuse a run that does not resume into ``out`` where checkpoint ``directory`` is (or
    a save that did not finish left one beside it): another run's, whose log its own would
    mix with and which a later resume would continue. Every rank calls it before the run
    writes into ``out`` (a store built there, a log).

    Raises:
        ValueError: naming the folder and the fix.
    """
    where = Path(directory)
    if (where / "meta.json").is_file() or left_aside(where):
        raise ValueError(
            f"{out} holds a run already (its checkpoint in {where}): pass resume=True to go "
            "on from it, or train into another folder (or remove that one)"
        )


FILES = "files"  # meta.json's record of each file: {"size": bytes, "crc32": int}


def _record(path: Path) -> dict[str, int]:
    return {"size": path.stat().st_size, "crc32": file_crc32(path)}


def check_files(root: Path, meta: dict[str, Any], fix: str) -> None:
    """Refuse a folder :func:`publish_tensors` wrote whose files are not as ``meta.json``
    records them (zeroed by a crash, cut short, edited): a checkpoint's tensors zeroed on disk
    loaded and trained on without a word, and one cut short raised safetensors' own
    ``incomplete metadata``. One written before the record has none: nothing to check.

    Raises:
        ValueError: naming the file, what differs and ``fix``.
    """
    files = meta.get(FILES)
    if not isinstance(files, dict):
        return
    for name, want in sorted(files.items()):
        if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
            raise ValueError(  # ("../x", "/etc/x": nothing outside the folder is read)
                f"{root / 'meta.json'}: lists {name!r}, not a file of this folder; {fix}"
            )
        path = root / name
        if not isinstance(want, dict) or not path.is_file():
            raise ValueError(f"{path}: missing, or not a file, where meta.json lists it; {fix}")
        size = path.stat().st_size
        if size != want.get("size"):
            raise ValueError(f"{path}: {size:,} bytes, meta.json says {want.get('size')}; {fix}")
        if file_crc32(path) != want.get("crc32"):
            raise ValueError(
                f"{path}: its CRC32 is not the one meta.json records (its bytes changed on "
                f"disk since it was written); {fix}"
            )


def load_tensors(path: Path, fix: str) -> dict[str, torch.Tensor]:
    """safetensors' ``load_file``, its refusal of a damaged file as a ValueError naming the
    file and ``fix`` (it raised its own ``SafetensorError: incomplete metadata``)."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except OSError:
        raise
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"{path}: not a whole safetensors file ({first}); {fix}") from e


def need_safetensors(what: str = "checkpoints (--checkpoint-every, --resume)") -> None:
    """Refuse, naming ``what`` needs it and the extra, where safetensors (every checkpoint's
    and saved model's tensors) is missing."""
    import importlib.util

    if importlib.util.find_spec("safetensors") is None:
        raise missing_package(what, "safetensors", "train")


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' ``save_file``, then an fsync; its I/O failures as the OSError they are:
    it reports a full disk as its own ``SafetensorError`` with the errno only in the text
    ("(os error 28)"), which :func:`lading.disk.scratch` could not tell from a bug."""
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path))
        with open(path, "rb") as written:  # on disk before the publish (save_file does not)
            os.fsync(written.fileno())
    except Exception as e:
        found = re.search(r"\(os error (\d+)\)", str(e))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from e


def load(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save`.

    Raises:
        FileNotFoundError: ``directory`` holds no ``meta.json``.
        ValueError: ``meta.json`` or ``state.json`` is damaged or not a lading checkpoint's,
            or a file is not as ``meta.json`` records it (:func:`check_files`), naming the
            file, what is wrong (and where in the state) and the fix.
    """
    root = Path(directory)
    meta_path = root / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{root} is not a lading checkpoint (no meta.json)")
    fix = (
        f"the checkpoint is damaged: resume from another checkpoint, or delete {root} to start over"
    )
    try:
        meta = json.loads(meta_path.read_bytes())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{meta_path}: not JSON ({e}); {fix}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ValueError(f"{meta_path}: not a lading checkpoint ({str(meta)[:200]})")
    check_version(FORMAT_NAME, meta.get("version"), meta_path)  # a ValueError too
    check_files(root, meta, fix)
    tensors = load_tensors(root / "tensors.safetensors", fix)
    state_path = root / "state.json"
    try:
        state = _restore(
            json.loads(state_path.read_bytes(), object_pairs_hook=_unique_keys), tensors
        )
    except _DamagedError as e:
        raise ValueError(f"{state_path}: {e.what}, at {e.place()}; {fix}") from None
    except RecursionError:
        raise ValueError(f"{state_path}: nested too deep to be a saved state; {fix}") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{state_path}: not JSON ({str(e)[:200]}); {fix}") from None
    if not isinstance(state, dict):
        raise ValueError(
            f"{state_path}: holds a {type(state).__name__}, not an object (a saved state is a "
            f"dict); {fix}"
        )
    return state
