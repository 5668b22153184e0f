#!python
# cython: embedsignature=True, binding=True, language_level=3
# cython: boundscheck=False, wraparound=False
"""A numpy array in, a numpy array out: the loop runs in C on a typed memoryview."""

import numpy as np

from libc.math cimport log


def masked_log(const double[::1] x):
    """``log(x)`` where ``x > 0`` and 0.0 elsewhere.

    Args:
        x: ``float64[n]``, C-contiguous.

    Returns:
        A new ``float64[n]`` array; the input is not modified (a remote task's inputs are
        read-only views of the object store, so it must return its result).
    """
    cdef Py_ssize_t i, n = x.shape[0]
    out = np.zeros(n, dtype=np.float64)
    cdef double[::1] out_view = out
    with nogil:
        for i in range(n):
            if x[i] > 0.0:
                out_view[i] = log(x[i])
    return out
