"""The tree the cluster protocol's messages follow after start-up (session.py).

A binomial tree over the rank numbers, rank 0 the root: the parent of rank r is
r with its lowest set bit cleared, and its children are r + 1, r + 2, r + 4, ...
below r's lowest set bit (every power of two for rank 0). So

- a rank's depth is the number of bits set in it: at most ceil(log2 N) hops to
  rank 0 (14 for 16,384 ranks), and rank 0 has that many children;
- a rank's subtree is the contiguous ranks r .. r + lowbit(r) - 1, and its
  children's subtrees follow each other in rank order: a subtree's records,
  merged child after child, are in rank order.

MPICH's binomial broadcast uses the same tree. `Star` is the protocol before the
tree (rank 0 the parent of every rank), kept for bench/cluster_tree.py to measure
beside it.
"""

from __future__ import annotations


class Tree:
    """The binomial tree of `size` ranks."""

    def __init__(self, size: int):
        self.size = size

    def parent(self, rank: int) -> int | None:
        return rank & (rank - 1) if rank else None

    def children(self, rank: int) -> list[int]:
        below = self._span(rank)
        out, step = [], 1
        while step < below and rank + step < self.size:
            out.append(rank + step)
            step <<= 1
        return out

    def subtree(self, rank: int) -> range:
        """The ranks under `rank`, itself included: contiguous."""
        return range(rank, min(rank + self._span(rank), self.size))

    def depth(self, rank: int) -> int:
        """Hops from `rank` up to rank 0."""
        return rank.bit_count()

    def height(self, rank: int) -> int:
        """Hops from `rank` down to the deepest rank below it (0 for a leaf)."""
        return max((1 + self.height(child) for child in self.children(rank)), default=0)

    def _span(self, rank: int) -> int:
        return rank & -rank if rank else self.size


class Star(Tree):
    """Rank 0 the parent of every other rank: one level, as the protocol was before
    the tree."""

    def parent(self, rank: int) -> int | None:
        return 0 if rank else None

    def children(self, rank: int) -> list[int]:
        return list(range(1, self.size)) if rank == 0 else []

    def subtree(self, rank: int) -> range:
        return range(self.size) if rank == 0 else range(rank, rank + 1)

    def depth(self, rank: int) -> int:
        return 1 if rank else 0
