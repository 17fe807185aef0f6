"""The LM loader's ways of reading an epoch, registered by name, each in its own module.

- :mod:`~lading.lm.modes.streams`: :class:`Streams`, the epoch stream cut into
  ``world_size x batch_size`` streams, read on with BPTT continuity (jittered lengths);
- :mod:`~lading.lm.modes.windows`: :class:`Windows`, independent ``seq_len + 1``-token windows
  in a shuffled order, dealt to ranks;
- :mod:`~lading.lm.modes.packed`: :class:`Packed`, windows into which whole documents were
  packed, the rest padding.

A user passes one options object (``LanguageModelLoader(corpus, 64, Streams(70))``); its
``mode`` names the registered :class:`~lading.lm.modes.base.Mode`, made from the options, that
does the work. The LM's source (:mod:`lading.lm.workload`) hands it each epoch's view and keeps
the plans; the one loader (:class:`lading.loading.Loader`) keeps the position and the state.
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

REGISTERED: dict[str, type[StreamsMode] | type[WindowsMode]] = {
    mode.name: mode for mode in (StreamsMode, WindowsMode, PackedMode)
}


def choices() -> str:
    """The registered options classes, as a user would call them: ``Streams(...), ...``."""
    names = [f"{mode.options.__name__}(...)" for mode in REGISTERED.values()]
    return ", ".join(names[:-1]) + " or " + names[-1]


def mode_of(sequence: object) -> Mode:
    """The registered mode ``sequence`` names, made from it, or a TypeError saying what
    ``sequence=`` takes."""
    mode = REGISTERED.get(getattr(type(sequence), "mode", None) or "")
    if mode is not None and isinstance(sequence, mode.options):
        return mode(sequence)  # type: ignore[arg-type]  # the options class is the mode's
    raise TypeError(f"sequence= must be {choices()}, got {sequence!r} ({type(sequence).__name__})")
