#!/usr/bin/env python3
"""Hit rate of a value cache of C entries under the volume scenario's keys.

The 8 KB --long shape: 1,572,864 keys, basho_bench pareto (shape 1.5, mean
at 20 % of the keys), 5 GET : 1 UPDATE. An UPDATE moves the key's record,
so its cached value is dead; a GET that misses inserts its value (LRU).
`ideal` is the share of GETs that go to the C most popular keys (a cache
that knew the distribution). Pure model: no store, no disk.
usage: python3 lru_model.py [C ...]
"""
import collections
import random
import sys

KEYS = 1_572_864
SHAPE = 1.5
S2 = KEYS * 0.2 * (SHAPE - 1.0)


def draw(r):
    return int(S2 * ((1.0 - r.random()) ** (-1.0 / SHAPE) - 1.0))


def lru(c, n=3_000_000):
    r = random.Random(1)
    cache = collections.OrderedDict()
    gets = hits = 0
    for _ in range(n):
        k = draw(r)
        if k >= KEYS:
            continue
        if r.random() < 1 / 6:
            cache.pop(k, None)
            continue
        gets += 1
        if k in cache:
            hits += 1
            cache.move_to_end(k)
        else:
            cache[k] = True
            if len(cache) > c:
                cache.popitem(last=False)
    return hits / gets


def ideal(c):
    cdf = lambda x: 1.0 - (1.0 + x / S2) ** -SHAPE
    return cdf(c) / cdf(KEYS)


for c in [int(a) for a in sys.argv[1:]] or [6_000, 28_000, 45_000, 66_000, 300_000]:
    print(f"{c:>8} entries: LRU {lru(c):6.1%}   ideal {ideal(c):6.1%}")
