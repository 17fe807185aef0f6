"""RAM → VRAM: batches reach the GPU ahead of the step, in narrow types, or are built there.

- :class:`DevicePrefetcher`: copies the next batches on a side CUDA stream while the step runs;
  passes the loader's epoch and state through, batches in flight not counted as consumed.
- :func:`narrow_dtype`, :func:`widen`: ids cross the bus in the store's dtype and are widened
  to int64 on the device; :func:`batch_bytes` measures a copy.
- :func:`to_device`: a tokenized store or LM corpus held on the device (:class:`ResidentTokens`),
  its ids gathered there by position.

Generic only: which tensors a batch holds and how a model's inputs are built from them is the
workload's (:mod:`lading.ir.layouts`, :mod:`lading.lm.resident`).
Layer: below the training loop and the workloads, above the loader core; imports torch.
"""

from lading.device.narrow import batch_bytes, narrow_dtype, to, widen
from lading.device.prefetch import DevicePrefetcher, map_tensors, tensors
from lading.device.resident import ResidentTokens, to_device

__all__ = [
    "DevicePrefetcher",
    "ResidentTokens",
    "batch_bytes",
    "map_tensors",
    "narrow_dtype",
    "tensors",
    "to",
    "to_device",
    "widen",
]
