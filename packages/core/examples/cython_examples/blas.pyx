#!python
# cython: embedsignature=True, binding=True, language_level=3
# cython: boundscheck=False, wraparound=False
"""Calling BLAS from Cython through ``scipy.linalg.cython_blas`` (no linking of our own)."""

import numpy as np

from libc.math cimport exp
from scipy.linalg.cython_blas cimport dgemm


def gaussian_kernel(const double[:, ::1] a, const double[:, ::1] b, double gamma):
    """The Gaussian (RBF) kernel matrix ``K[i, j] = exp(-gamma * |a_i - b_j|^2)``.

    The cross term ``a @ b.T`` comes from BLAS ``dgemm``; the rest is a C loop.

    Args:
        a: ``float64[n, d]``, C-contiguous.
        b: ``float64[m, d]``, C-contiguous.
        gamma: the kernel's inverse squared length scale, > 0.

    Returns:
        ``float64[n, m]``.

    Raises:
        ValueError: ``a`` and ``b`` have different numbers of columns.
    """
    cdef int n = a.shape[0], m = b.shape[0], d = a.shape[1]
    if b.shape[1] != d:
        raise ValueError(f"a has {d} columns but b has {b.shape[1]}: they must match")
    out = np.empty((n, m), dtype=np.float64)
    cdef double[:, ::1] k = out
    cdef double alpha = -2.0, beta = 0.0
    cdef Py_ssize_t i, j, t
    cdef double[::1] a_sq = np.einsum("ij,ij->i", a, a)
    cdef double[::1] b_sq = np.einsum("ij,ij->i", b, b)
    # Row-major k = -2 a b^T is column-major k^T = -2 b a^T: dgemm("T", "N") on the
    # column-major views b^T (d x m) and a^T (d x n).
    if n > 0 and m > 0 and d > 0:
        dgemm(b"T", b"N", &m, &n, &d, &alpha, <double*>&b[0, 0], &d, <double*>&a[0, 0], &d,
              &beta, &k[0, 0], &m)
    else:
        out[:] = 0.0
    with nogil:
        for i in range(n):
            for j in range(m):
                k[i, j] = exp(-gamma * (k[i, j] + a_sq[i] + b_sq[j]))
    return out
