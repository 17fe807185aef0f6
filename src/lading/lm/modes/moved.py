"""The LM loader's keywords from before its options objects, refused naming their new spelling.

``LanguageModelLoader(corpus, 64, bptt=70, mode="windows", boundaries=True)`` was the old
form; it is now ``LanguageModelLoader(corpus, 64, Windows(seq_len=70, boundaries=True))``. An
old call fails with a TypeError that writes the new one out from the values it was given, and
never keeps working under another meaning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lading.lm.modes import REGISTERED, choices

# in the order the message lists them; bptt and mode choose the options class, the rest its fields
MOVED = ("bptt", "mode", "bptt_jitter", "backwards", "chunk_batches", "boundaries", "eod_mask_loss")
RENAMED = {"bptt_jitter": "jitter"}
WINDOW_ONLY = ("boundaries", "eod_mask_loss")  # without mode=, these meant a window mode


def refuse_moved(old: Mapping[str, Any], where: str) -> None:
    """Raise a TypeError for any keyword in ``old``: a moved one names the options object
    that replaces it, written out with the values given; any other is unknown, as Python says."""
    unknown = sorted(set(old) - set(MOVED))
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    if not old:
        return
    given = ", ".join(f"{key}=" for key in MOVED if key in old)
    default = "windows" if any(key in old for key in WINDOW_ONLY) else "streams"
    mode = REGISTERED.get(old.get("mode", default))
    if mode is None:
        raise TypeError(f"{where}: {given} moved: pass sequence= as one of {choices()}")
    fields = [field.name for field in dataclasses.fields(mode.options)]
    length = fields[0]  # bptt (streams) or seq_len (windows): the one positional field
    args = [f"{length}={old['bptt']!r}" if "bptt" in old else f"{length}=..."]
    missing = []
    for key in MOVED[2:]:
        if key in old:
            name = RENAMED.get(key, key)
            if name in fields:
                args.append(f"{name}={old[key]!r}")
            else:
                missing.append(f"{key}=")
    message = f"{where}: {given} moved: pass sequence={mode.options.__name__}({', '.join(args)})"
    if missing:
        message += (
            f"; {mode.options.__name__} has no {', '.join(missing)} (its mode does not use it)"
        )
    raise TypeError(message)
