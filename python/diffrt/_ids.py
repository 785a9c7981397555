"""Token id sequences as contiguous int32 arrays for the C API."""

import numpy as np

from ._lib import ArgumentOverflow, InvalidArgument

_I32 = np.iinfo(np.int32)


def as_ids(ids):
    """A 1-D C-contiguous int32 array of ``ids`` (a sequence of ints or an
    integer ndarray). Raises TypeError for non-integers, ArgumentOverflow (a
    ValueError and OverflowError) for a value outside int32, InvalidArgument
    (a ValueError) for a shape that is not 1-D."""
    if isinstance(ids, (str, bytes)):
        raise TypeError("token ids must be a sequence of integers, not text")
    if isinstance(ids, np.ndarray):
        a = ids
    else:
        ids = list(ids)
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
            raise TypeError("token ids must be integers")
        if any(i < _I32.min or i > _I32.max for i in ids):
            raise ArgumentOverflow("token ids must fit in int32")
        return np.array(ids, dtype=np.int32)
    if a.ndim != 1:
        raise InvalidArgument(f"token ids must be 1-D, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got dtype {a.dtype}")
    if a.size and a.dtype != np.int32 and (a.min() < _I32.min or a.max() > _I32.max):
        raise ArgumentOverflow("token ids must fit in int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def check_vocab(arr, vocab):
    """arr (int32 ids) when every id is in [0, vocab), else InvalidArgument
    (a ValueError) naming the first that is not, its position and the
    vocabulary (as drt_session_forward would)."""
    bad = np.flatnonzero((arr < 0) | (arr >= vocab))
    if bad.size:
        i = int(bad[0])
        raise InvalidArgument(f"token id {int(arr[i])} (position {i}) is outside the vocabulary [0, {vocab})")
    return arr


def check_id(id, vocab):
    """id (an int) when it is in [0, vocab), else InvalidArgument (a
    ValueError) naming it and the vocabulary."""
    if not 0 <= id < vocab:
        raise InvalidArgument(f"token id {id} is outside the vocabulary [0, {vocab})")
    return id
