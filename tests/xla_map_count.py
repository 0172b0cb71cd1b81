"""Why one process for the whole test suite crashes: a reproducer (not a test; run it).

XLA:CPU loads every kernel of a compiled program into memory mappings of its own (code,
read-only data, data: three per kernel), and JAX keeps every compiled program until its
caches are cleared. A gflow program has hundreds of kernels, so each one compiled adds
about 1,250 mappings to the process; Linux allows ``vm.max_map_count`` of them (65,530 by
default), and past that LLVM cannot map the next program: ``LLVM ERROR: Unable to
allocate section memory!`` (an abort) or a segmentation fault inside XLA's compiler,
whichever allocation fails first. ``jax.clear_caches()`` drops the programs and their
mappings.

    python tests/xla_map_count.py                # mappings per program, and after clearing
    python tests/xla_map_count.py --until-crash  # compile new shapes until the process dies
"""

import sys

import jax
import numpy as np

import gflow


def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def compile_one(hidden):
    """One new program: a 2-hidden-2 network (each width is a new shape)."""
    X = np.array([[1.0, 0.2], [0.3, 1.0]])
    params = [np.full((hidden, 2), 0.3), np.full((2, hidden), 0.2)]
    gflow.simulate(params, X, X, t1=0.1)


def main(argv):
    with open("/proc/sys/vm/max_map_count") as f:
        limit = int(f.read())
    start = mappings()
    print(f"vm.max_map_count {limit}; mappings at start {start}", flush=True)
    for hidden in range(2, 1000):
        compile_one(hidden)
        now = mappings()
        print(f"hidden width {hidden}: {now} mappings (+{now - start} since the start)", flush=True)
        if "--until-crash" not in argv and hidden == 4:
            break
    jax.clear_caches()
    print(f"after jax.clear_caches(): {mappings()} mappings", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
