"""What the frameworks assume of a loader's epochs, checked where a lading loader meets them.

The HF Trainer and Lightning size every epoch once, from ``len()`` at the start of training:
the HF Trainer plans its steps (and, at a resume, the epoch it is in: global step // steps an
epoch) from it, Lightning stops each epoch at it. A loader whose epochs differ in length
(jittered ``Streams``, :attr:`lading.lm.LanguageModelLoader.epochs_alike`) would lose the end
of every longer epoch and leave a shorter one's last accumulation unstepped, so it is refused
where it meets them, naming the fix.
"""

from __future__ import annotations

from typing import Any


def refuse_epochs_of_varying_length(loader: Any, framework: str) -> None:
    """Refuse ``loader`` where its epochs differ in batch count (``framework`` names who sizes
    them once).

    Raises:
        ValueError: naming the loader's sequence, why and the fix.
    """
    if getattr(loader, "epochs_alike", True):
        return
    raise ValueError(
        f"{framework} sizes every epoch from len() at the start of training, and this "
        f"loader's epochs differ in length ({getattr(loader, 'sequence', 'its sequence')!r} "
        "draws its lengths each epoch): pass Streams(bptt, jitter=None), or train with "
        "lading's own loop (lading train lm), which counts each epoch's batches"
    )
