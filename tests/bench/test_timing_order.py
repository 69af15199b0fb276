"""bench/attention_torch/timing_order.py: every row is a permutation, positions and immediate predecessors balanced
over one cycle of rows, counted independently of how the square is built, for 1 to 12 backends."""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "attention_torch"))
from timing_order import balanced_orders  # noqa: E402


def check(n):
    rows = balanced_orders(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n), (n, len(rows))
    for row in rows:
        assert sorted(row) == list(range(n)), (n, row)
    for pos in range(n):
        at = collections.Counter(row[pos] for row in rows)
        assert len(set(at.values())) == 1 and len(at) == n, (n, pos, at)
    follows = collections.Counter((a, b) for row in rows for a, b in zip(row, row[1:]))
    if n > 1:
        counts = {follows[(a, b)] for a in range(n) for b in range(n) if a != b}
        assert len(counts) == 1 and 0 not in counts, (n, counts)
        assert all(a != b for a, b in follows), n


if __name__ == "__main__":
    for n in range(1, 13):
        check(n)
    print("timing_order: balanced for 1..12 backends")
