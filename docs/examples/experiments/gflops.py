"""A dense matrix-multiply kernel (stand-in for linpack): prints GFLOPS."""

import time

import numpy as np

N, REPEAT = 384, 20
rng = np.random.default_rng(1)
a, b = rng.random((N, N)), rng.random((N, N))
a @ b  # warm the BLAS up
start = time.perf_counter()
for _ in range(REPEAT):
    a @ b
print(f"GFLOPS: {2 * N**3 * REPEAT / (time.perf_counter() - start) / 1e9:.2f}")
