"""The order in which compare.py's interleaved rounds time the backends of one problem (torch-free, so CI tests it).

Why a Latin square and not a random order: the H200 runs attention at its power limit, and a timing depends on what
ran just before it (a kernel timed right after a light one starts at higher clocks). Random orders over 7-15 rounds
leave some backend with luckier predecessors than another (the same kernel measured 1-2% apart in two columns,
run after run, with a fixed seed). A Williams Latin square gives every backend every position equally often
and every immediate predecessor equally often over one cycle of its rows.
"""


def balanced_orders(n):
    """A Williams Latin square over range(n): a list of rows (permutations of range(n)) in which every index sits at
    every position equally often and follows every other index immediately equally often (n rows for even n, 2n for
    odd n, where one square cannot balance the neighbours)."""
    first, lo, hi = [], 0, n - 1
    for k in range(n):  # 0, n-1, 1, n-2, ...: the differences between neighbours cover every nonzero residue once
        if k % 2 == 0:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2 == 1:
        rows += [list(reversed(row)) for row in rows]
    return rows
