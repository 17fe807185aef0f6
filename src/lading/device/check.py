"""Whether a device can be used in this process, said before torch fails deep inside.

Every public entry that takes a ``device=`` passes it through :func:`usable_device`: torch's
own failure on a CPU build is a bare ``AssertionError: Torch not compiled with CUDA enabled``
from wherever the first tensor is made (a resident copy, a narrow batch's widening).
"""

from __future__ import annotations

import torch

from lading.errors import DeviceUnavailableError


def usable_device(device: torch.device | str) -> torch.device:
    """``device`` as a :class:`torch.device`, checked where it is a CUDA one
    (:func:`check_cuda`)."""
    device = torch.device(device)
    if device.type == "cuda":
        check_cuda(device)
    return device


def check_cuda(device: torch.device) -> None:
    """Raise :class:`~lading.errors.DeviceUnavailableError` naming why ``device`` (a CUDA
    device) cannot be used here and what to pass instead, before torch fails deep inside."""
    if not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
        raise DeviceUnavailableError(
            f"device {str(device)!r}: CUDA is not available in this process (torch "
            f"{torch.__version__}, {built}); pass device='cpu' (batches are then handed out "
            "as they come), or run where a GPU and a CUDA build of torch are"
        )
    count = torch.cuda.device_count()
    if device.index is not None and not 0 <= device.index < count:
        raise DeviceUnavailableError(
            f"device {str(device)!r}: this process sees {count} CUDA device(s), 0 to "
            f"{count - 1}; pass one of them (under torchrun: f'cuda:{{local_rank}}')"
        )
