"""Duplicate groups are joined by union-find: a chain of pairs is one group."""

from __future__ import annotations

from wherein.search.curate.dupes import UnionFind


def test_pairs_sharing_a_member_make_one_group():
    uf = UnionFind()
    uf.union(1, 3)
    uf.union(2, 3)  # 3 already belongs to 1: its root, not 3 itself, must take 2 in
    assert uf.groups() == [[1, 2, 3]]


def test_chains_join_in_any_order():
    uf = UnionFind()
    for a, b in [(5, 6), (7, 8), (6, 8), (1, 9), (9, 5), (2, 3)]:
        uf.union(a, b)
    assert sorted(uf.groups()) == [[1, 5, 6, 7, 8, 9], [2, 3]]
