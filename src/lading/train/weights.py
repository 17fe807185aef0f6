"""The trained model a run leaves in ``OUT/model``: weights and what rebuilds the model, no pickle.

``model.safetensors`` holds the weights (the ``state_dict``), ``config.json`` the model's class
and constructor arguments, ``meta.json`` (written last) the format. The folder is written
beside ``OUT/model`` and renamed into place under its build lock (:mod:`lading.disk`), so a run
killed mid-write leaves the previous model or none, never a half-written one that loads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lading.disk.atomic import refuse_to_replace
from lading.train.checkpoint import check_files, load_tensors, publish_tensors

FORMAT_NAME = "lading.train.model"
VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
META_FILE = "meta.json"


def model_dir(out: Path) -> Path:
    """Where a run in ``out`` keeps its trained model."""
    return Path(out) / "model"


def check_replaceable(directory: str | os.PathLike[str]) -> None:
    """Refuse, before a run trains, a ``directory`` its model could not replace at the end: a
    file, or a folder lading did not write (a ``FileExistsError`` naming it and the fix), or
    safetensors missing to write it (an ``ImportError`` naming the extra: it failed after the
    last step, the run lost)."""
    from lading.train.checkpoint import need_safetensors

    need_safetensors(f"the trained model ({directory})")
    refuse_to_replace(Path(directory), FORMAT_NAME)


def save_model(model: nn.Module, directory: str | os.PathLike[str], config: dict[str, Any]) -> Path:
    """Write ``model``'s weights and ``config`` (JSON: what rebuilds it) to ``directory``,
    replacing a model saved there before, atomically; return ``directory``."""
    dest = Path(directory)
    # copies of their own: tied weights share storage, which safetensors refuses to write
    tensors = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    texts = {CONFIG_FILE: json.dumps(config, indent=2)}
    publish_tensors(dest, tensors, MODEL_FILE, texts, {"format": FORMAT_NAME, "version": VERSION})
    return dest


def load_weights(
    directory: str | os.PathLike[str], kind: str
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config, state_dict)`` of a model :func:`save_model` wrote for ``kind`` (the
    ``"kind"`` its config names: ``"lm"``, ``"sessions"``).

    Raises:
        FileNotFoundError: ``directory`` holds no finished model (no ``meta.json``).
        ValueError: a file is not what :func:`save_model` writes, or the model is of
            another kind; naming the file and the fix.
    """
    root = Path(directory)
    fix = f"point at the OUT/model folder a `lading train {kind}` run wrote, or train again"
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"{root} holds no trained model (no {META_FILE}); {fix}")
    meta = _json(meta_path, fix)
    if meta.get("format") != FORMAT_NAME or meta.get("version") != VERSION:
        raise ValueError(
            f"{meta_path}: not a lading trained model of version {VERSION} ({str(meta)[:200]}); "
            f"{fix}"
        )
    config = _json(root / CONFIG_FILE, fix)
    if config.get("kind") != kind:
        raise ValueError(
            f"{root / CONFIG_FILE}: a model of kind {config.get('kind')!r}, not {kind!r}; {fix}"
        )
    check_files(root, meta, fix)
    return config, load_tensors(root / MODEL_FILE, fix)


def _json(path: Path, fix: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot be read as JSON ({str(e)[:200]}); {fix}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: holds a {type(value).__name__}, not an object; {fix}")
    return value
