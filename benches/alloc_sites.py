#!/usr/bin/env python3
"""Sums up the allocation backtraces the gateway's allocation test records.

    ALLOC_SITES=/tmp/sites.txt cargo test -p context-relay-gateway --test alloc_per_request -- --nocapture
    benches/alloc_sites.py /tmp/sites.txt 50

The second argument is the test's figure (allocations per request). The test records every
allocation of a run of requests, so each line is a count per request: the share of the figure
taken by the allocations made through the same first frames (after the allocator's own; module
paths left out), and the innermost workspace frame they come from.
"""
import collections
import re
import sys

ALLOCATOR = re.compile(
    r"^(std::|core::|alloc::|__rust|<alloc::|<core::|<std::|<T as alloc|<?alloc_per_request"
    r"|count$|alloc$|alloc_impl|allocate$|box_new_uninit|try_allocate_in|with_capacity_in)"
)


def frames(sample):
    names = re.findall(r"^\s+\d+: (.+)$", sample, re.M)
    names = [re.sub(r"::h[0-9a-f]{16}$", "", n) for n in names]
    return [n for n in names if not ALLOCATOR.match(n)]


def short(name):
    """A frame without module paths, cut short."""
    return re.sub(r"\b[a-z_][a-z0-9_]*::", "", name)[:60]


def main():
    path, per_request = sys.argv[1], float(sys.argv[2])
    samples = open(path, encoding="utf-8").read().split("=====\n")[1:]
    sites = collections.Counter()
    for sample in samples:
        names = frames(sample)
        ours = next((n for n in names if "context_relay" in n), "(outside the workspace)")
        first = " | ".join(short(n) for n in names[:3]) or "?"
        sites[f"{first}  <-  {short(ours)}"] += 1
    for site, n in sites.most_common(80):
        print(f"{n * per_request / len(samples):6.1f}  {site}")


if __name__ == "__main__":
    main()
