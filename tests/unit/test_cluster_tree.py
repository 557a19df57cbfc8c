"""The cluster protocol's tree (cluster/tree.py)."""

from __future__ import annotations

import math

import pytest

from noisescope.cluster.tree import Star, Tree


@pytest.mark.parametrize("shape", [Tree, Star])
def test_every_rank_is_reached_once_within_log2_hops(shape):
    for size in range(1, 71):
        tree = shape(size)
        reached, frontier = [0], [0]
        while frontier:
            frontier = [c for rank in frontier for c in tree.children(rank)]
            reached += frontier
        assert sorted(reached) == list(range(size)), size  # each rank exactly once
        for rank in range(size):
            for child in tree.children(rank):
                assert tree.parent(child) == rank
                assert tree.depth(child) == tree.depth(rank) + 1
            below, frontier = [rank], [rank]
            while frontier:
                frontier = [c for r in frontier for c in tree.children(r)]
                below += frontier
            assert sorted(below) == list(tree.subtree(rank))  # contiguous, in rank order
            deepest = max(tree.depth(r) for r in below)
            assert tree.height(rank) == deepest - tree.depth(rank)
        assert tree.parent(0) is None and tree.depth(0) == 0
        if shape is Tree:
            assert max(map(tree.depth, range(size))) <= math.ceil(math.log2(size)), size
            assert len(tree.children(0)) == math.ceil(math.log2(size))
