"""Compiled modules of the Cython example (``../cython_remote.py`` builds them in place).

* ``simple``: plain Python functions compiled by Cython, typed ``cpdef`` Fibonacci and primes,
  and a compiled Python class.
* ``masked_log``: a numpy array processed through a typed memoryview, releasing the GIL.
* ``blas``: a Gaussian kernel matrix from ``scipy.linalg.cython_blas``'s ``dgemm``.
"""
