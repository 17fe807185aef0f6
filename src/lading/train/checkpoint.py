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
)
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
        if value and all(isinstance(k, int) for k in value):
            return {_INT_KEYS: {str(k): _flatten(v, tensors) for k, v in value.items()}}
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"checkpoint dict keys must be str or int, found {list(value)[:3]}")
        return {k: _flatten(v, tensors) for k, v in value.items()}
    if isinstance(value, tuple):
        return {_TUPLE: [_flatten(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_flatten(v, tensors) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot checkpoint a {type(value).__name__} without pickle")


def _restore(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, dict):
        if _TENSOR in value:
            return tensors[value[_TENSOR]]
        if _INT_KEYS in value:
            return {int(k): _restore(v, tensors) for k, v in value[_INT_KEYS].items()}
        if _TUPLE in value:
            return tuple(_restore(v, tensors) for v in value[_TUPLE])
        return {k: _restore(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, tensors) for v in value]
    return value


def save(state: dict[str, Any], directory: str | os.PathLike[str]) -> None:
    """Write ``state`` to the checkpoint directory ``directory`` (atomically replaced).

    Under ``directory``'s build lock, as every build: what saves killed before left beside it
    (a full-size ``checkpoint.tmp-<pid>-*``; a checkpoint a publish renamed aside) is swept or
    put back first (:func:`lading.disk.remove_dead_temps`), a live process's left alone.
    """
    dest = Path(directory)
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _flatten(state, tensors)
    dest.parent.mkdir(parents=True, exist_ok=True)  # for the lock
    with build_lock(dest):
        remove_dead_temps(dest)
        _write(skeleton, tensors, dest)


def _write(skeleton: Any, tensors: dict[str, torch.Tensor], dest: Path) -> None:
    """The checkpoint's files into a scratch directory, ``meta.json`` last, then published."""
    with scratch(dest) as tmp:  # a full disk: OutOfSpaceError, the old checkpoint kept
        _save_tensors(tensors, tmp / "tensors.safetensors")
        (tmp / "state.json").write_text(json.dumps(skeleton))
        meta = {"format": FORMAT_NAME, "version": current_version(FORMAT_NAME)}
        (tmp / "meta.json").write_text(json.dumps(meta))
        publish(tmp, dest)


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


def need_safetensors() -> None:
    """Refuse, naming the extra, where safetensors (every checkpoint's tensors) is missing."""
    import importlib.util

    if importlib.util.find_spec("safetensors") is None:
        raise missing_package("checkpoints (--checkpoint-every, --resume)", "safetensors", "train")


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' ``save_file``, its I/O failures as the OSError they are: it reports a full
    disk as its own ``SafetensorError`` with the errno only in the text ("(os error 28)"), which
    :func:`lading.disk.scratch` could not tell from a bug."""
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path))
    except Exception as e:
        found = re.search(r"\(os error (\d+)\)", str(e))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from e


def load(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save`."""
    from safetensors.torch import load_file

    root = Path(directory)
    meta_path = root / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{root} is not a lading checkpoint (no meta.json)")
    meta = json.loads(meta_path.read_text())
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ValueError(f"{meta_path}: not a lading checkpoint ({meta})")
    check_version(FORMAT_NAME, meta.get("version"), meta_path)  # a ValueError too
    tensors = load_file(str(root / "tensors.safetensors"))
    return dict(_restore(json.loads((root / "state.json").read_text()), tensors))
