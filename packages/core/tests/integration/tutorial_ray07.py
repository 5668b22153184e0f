"""The Ray 0.7 tutorial and actors chapter of the reference, with only the import changed.

Each documented result is checked with an assert. Run as a script (the test runs it in a
subprocess, as a user would).
"""

import os
import tempfile
import time
from pathlib import Path

import numpy as np

import rayfield as ray
from rayfield.testing import wait_for

ray.init(num_cpus=4, object_store_memory=256 << 20)

# Put and Get
x = "example"
x_id = ray.put(x)
assert repr(x_id).startswith("ObjectRef(")
x_id = ray.put("example")
assert ray.get(x_id) == "example"
result_ids = [ray.put(i) for i in range(10)]
assert ray.get(result_ids) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


# Asynchronous computation
def add1(a, b):
    return a + b


@ray.remote
def add2(a, b):
    return a + b


x_id = add2.remote(1, 2)
assert ray.get(x_id) == 3


def f1():
    time.sleep(1)


@ray.remote
def f2():
    time.sleep(1)


ray.get([f2.remote() for _ in range(4)])

# Four tasks on four CPUs run in parallel: each leaves a marker and waits for the other
# three's, which only works if all four run at once.
meeting = tempfile.mkdtemp()


@ray.remote
def meet(i):
    Path(meeting, str(i)).touch()
    wait_for(lambda: len(os.listdir(meeting)) == 4, 60, "the other three tasks")
    return i


assert ray.get([meet.remote(i) for i in range(4)]) == [0, 1, 2, 3]

assert ray.get(add2.remote(1, 2)) == 3
assert ray.get(add2.remote(1, ray.put(2))) == 3
assert ray.get(add2.remote(ray.put(1), ray.put(2))) == 3


@ray.remote(num_return_vals=3)
def return_multiple():
    return 1, 2, 3


a_id, b_id, c_id = return_multiple.remote()
assert ray.get([a_id, b_id, c_id]) == [1, 2, 3]


# Dependencies between tasks
@ray.remote
def f(x):
    return x + 1


x = f.remote(0)
y = f.remote(x)
z = f.remote(y)
assert ray.get(z) == 3


@ray.remote
def generate_data():
    return np.random.normal(size=1000)


@ray.remote
def aggregate_data(x, y):
    return x + y


data = [generate_data.remote() for _ in range(100)]
while len(data) > 1:
    data.append(aggregate_data.remote(data.pop(0), data.pop(0)))
[total] = ray.get(data)
assert total.shape == (1000,)


# Remote functions within remote functions
@ray.remote
def sub_experiment(i, j):
    return i + j


@ray.remote
def run_experiment(i):
    sub_results = []
    for j in range(10):
        sub_results.append(sub_experiment.remote(i, j))
    return sum(ray.get(sub_results))


results = [run_experiment.remote(i) for i in range(5)]
assert ray.get(results) == [45, 55, 65, 75, 85]


# Actors
@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value


a1 = Counter.remote()
a2 = Counter.remote()
assert ray.get(a1.increment.remote()) == 1
assert ray.get(a2.increment.remote()) == 1
counters = [Counter.remote() for _ in range(10)]
results = ray.get([c.increment.remote() for c in counters])
assert results == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
results = ray.get([counters[0].increment.remote() for _ in range(5)])
assert results == [2, 3, 4, 5, 6]

# wait
ready, not_ready = ray.wait([f.remote(i) for i in range(4)], num_returns=2, timeout=10.0)
assert len(ready) == 2 and len(not_ready) == 2

ray.shutdown()
print("tutorial ok")
