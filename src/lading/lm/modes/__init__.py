"""The LM loader's ways of reading an epoch, registered by name, each in its own module.

- :mod:`~lading.lm.modes.streams`: :class:`Streams`, the epoch stream cut into
  ``world_size x batch_size`` streams, read on with BPTT continuity (jittered lengths);
- :mod:`~lading.lm.modes.windows`: :class:`Windows`, independent ``seq_len + 1``-token windows
  in a shuffled order, dealt to ranks;
- :mod:`~lading.lm.modes.packed`: :class:`Packed`, windows into which whole documents were
  packed, the rest padding.

A user passes one options object (``LanguageModelLoader(corpus, 64, Streams(70))``); its
``mode`` names the registered :class:`~lading.lm.modes.base.Mode` that does the work. The
loader (:class:`lading.lm.LanguageModelLoader`) keeps the cursor, the state and the
DataLoader workers, the same for all three, and asks its mode for the rest.
"""

from __future__ import annotations

from lading.lm.modes.base import Mode
from lading.lm.modes.packed import Packed, PackedMode
from lading.lm.modes.streams import Streams, StreamsMode
from lading.lm.modes.windows import Windows, WindowsMode

__all__ = [
    "REGISTERED",
    "Mode",
    "Packed",
    "SequenceOptions",
    "Streams",
    "Windows",
    "mode_of",
]

SequenceOptions = Streams | Windows | Packed  # what LanguageModelLoader(sequence=) takes

REGISTERED: dict[str, Mode] = {
    mode.name: mode for mode in (StreamsMode(), WindowsMode(), PackedMode())
}


def choices() -> str:
    """The registered options classes, as a user would call them: ``Streams(...), ...``."""
    names = [f"{mode.options.__name__}(...)" for mode in REGISTERED.values()]
    return ", ".join(names[:-1]) + " or " + names[-1]


def mode_of(sequence: object) -> Mode:
    """The registered mode ``sequence`` names, or a TypeError saying what ``sequence=`` takes
    (an int is the old ``bptt`` argument: the error says where it moved)."""
    mode = REGISTERED.get(getattr(type(sequence), "mode", None) or "")
    if mode is not None and isinstance(sequence, mode.options):
        return mode
    got = f"got {sequence!r} ({type(sequence).__name__})"
    if isinstance(sequence, int) and not isinstance(sequence, bool):
        got += f": the old bptt argument moved: pass sequence=Streams(bptt={sequence})"
    raise TypeError(f"sequence= must be {choices()}, {got}")
