"""Many nodes: scans under mpirun or srun (one process per node or per rank), aligned
in time, gathered into one fleet bundle; and `bsp`, the slowdown a bulk-synchronous
loop really suffers beside the one `predict` expects.

mpi.py (mpi4py, deadline-bound messages) -> session.py (the protocol: ready,
start, results) -> scan.py / bsp.py (what each rank measures, what rank 0 builds).
The analysis of fleets is in analysis/fleet.py, the output in render/fleet.py.
"""
