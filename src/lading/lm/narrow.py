"""The narrowest signed integer dtype that holds an array's values: what a loader keeps per
document or per piece costs 2 or 4 bytes where 8 are not needed (int32 below 2**31 tokens)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def narrow(values: npt.NDArray[Any], smallest: type[np.signedinteger[Any]] = np.int16) -> Any:
    """``values`` as the narrowest of int16 (or ``smallest``), int32, int64 that holds its
    minimum and maximum (checked on the values, not assumed); the array itself when it is
    already that dtype. Readers take ``int(a[i])`` or ``a.astype(np.int64)`` before adding."""
    values = np.asarray(values)
    low = int(values.min()) if values.size else 0
    high = int(values.max()) if values.size else 0
    for dtype in (np.int16, np.int32, np.int64):
        if np.dtype(dtype).itemsize < np.dtype(smallest).itemsize:
            continue
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype, copy=False)
    raise ValueError(f"values {low} to {high} do not fit in int64")


def all_documents(count: int) -> npt.NDArray[np.signedinteger[Any]]:
    """``0 … count-1``, int32 below 2**31 documents (4 bytes a document in every process)."""
    return np.arange(count, dtype=np.int32 if count < 2**31 else np.int64)
