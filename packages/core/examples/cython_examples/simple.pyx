#!python
# cython: embedsignature=True, binding=True, language_level=3
"""Small functions compiled by Cython, to be made remote with ``rf.remote(simple.fib)``.

A ``.pyx`` file cannot use ``@rf.remote`` itself: the driver wraps the compiled functions.
"""


def greet(name):
    """Untyped Python code, compiled as is: returns ``"hello, <name>"``."""
    return "hello, " + name


cpdef long fib(int n):
    """The ``n``-th Fibonacci number (``fib(0) == 0``) by the naive double recursion, in C."""
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def fib_python_objects(n):
    """The same recursion on Python integers: what Cython gives without type declarations."""
    if n < 2:
        return n
    return fib_python_objects(n - 1) + fib_python_objects(n - 2)


cpdef list primes(int count):
    """The first ``count`` primes, by trial division over C ints. ``count`` at most 10,000."""
    cdef int found = 0, candidate = 2, i
    cdef int[10000] table
    if count > 10000:
        raise ValueError(f"primes(count) supports count <= 10000, got {count}")
    while found < count:
        for i in range(found):
            if candidate % table[i] == 0:
                break
        else:
            table[found] = candidate
            found += 1
        candidate += 1
    return [table[i] for i in range(found)]


class Accumulator:
    """A Python class compiled by Cython; ``rf.remote(simple.Accumulator)`` makes it an actor."""

    def __init__(self, start=0):
        self.total = start

    def add(self, value):
        """Adds ``value`` and returns the new total."""
        self.total += value
        return self.total
