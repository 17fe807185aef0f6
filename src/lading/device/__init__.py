"""RAM → VRAM: batches reach the GPU ahead of the step, in narrow types, or are built there.

- :class:`DevicePrefetcher`: copies the next batches on a side CUDA stream while the step runs;
  passes the loader's epoch and state through, batches in flight not counted as consumed.
- :func:`expand`: narrow batches (ids in the store's dtype + lengths) widened on the device into
  the model's int64 ids, attention mask and token types; :func:`batch_bytes` measures a copy.
- :func:`to_device`: a tokenized store or LM corpus held on the device
  (:class:`ResidentTokens`, :class:`ResidentStream`); batches gathered there from rows or
  stream positions alone.

Layer: below the training loop and the workloads, above the loader core; imports torch.
"""

from lading.device.narrow import batch_bytes, expand, is_narrow, narrow_dtype, widen
from lading.device.prefetch import DevicePrefetcher, map_tensors, tensors
from lading.device.resident import ResidentStream, ResidentTokens, to_device

__all__ = [
    "DevicePrefetcher",
    "ResidentStream",
    "ResidentTokens",
    "batch_bytes",
    "expand",
    "is_narrow",
    "map_tensors",
    "narrow_dtype",
    "tensors",
    "to_device",
    "widen",
]
