"""Which CPUs each rank measures, and which injections it runs.

One process per node measures all the CPUs it may run on (or --cpus). When
several ranks share a node, no two may measure the same CPU (their samplers
would compete): ranks the launcher bound to disjoint CPU sets (mpirun's
default --bind-to core, srun --cpu-bind=cores) each measure their own set;
otherwise the node's candidate CPUs are split into contiguous shares by
local rank (local rank 0 takes the first share).
"""

from __future__ import annotations

from ..errors import UsageError
from ..probes import Injection
from ..units import format_cpu_list
from .mpi import RankPlacement


def assign_cpus(placement: RankPlacement) -> tuple[int, ...]:
    candidates = placement.local_candidates
    mine = candidates[placement.local_rank]
    seen: set[int] = set()
    disjoint = True
    for cpus in candidates:
        disjoint &= seen.isdisjoint(cpus)
        seen.update(cpus)
    if disjoint:
        return mine
    union = sorted(seen)
    ranks = placement.local_size
    if len(union) < ranks:
        raise UsageError(f"{ranks} ranks on node {placement.node} share "
                         f"{len(union)} CPU{'s' if len(union) != 1 else ''} "
                         f"({format_cpu_list(union)})",
                         "start at most one rank per CPU (e.g. mpirun --map-by core) "
                         "or one per node")
    i = placement.local_rank
    return tuple(union[i * len(union) // ranks:(i + 1) * len(union) // ranks])


def own_injections(injections: tuple[Injection, ...], cpus: tuple[int, ...], rank: int,
                   ranks: tuple[int, ...] | None) -> tuple[Injection, ...]:
    """The injections this rank runs: those on a CPU it measures (or all CPUs it
    uses), and only on the ranks listed in `ranks` when that is given."""
    if ranks is not None and rank not in ranks:
        return ()
    return tuple(i for i in injections if i.cpu in cpus)
