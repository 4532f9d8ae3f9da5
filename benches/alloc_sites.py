#!/usr/bin/env python3
"""Sums up the allocation backtraces the gateway's allocation test samples.

    ALLOC_SITES=/tmp/sites.txt cargo test -p context-relay-gateway --test alloc_per_request -- --nocapture
    benches/alloc_sites.py /tmp/sites.txt 108

The second argument is the test's figure (allocations per request): each line shows the
share of it taken by the allocations whose innermost workspace frame is the one named.
"""
import collections
import re
import sys

ALLOCATOR = re.compile(r"^(std::|core::|alloc::|__rust|<alloc::|<core::|<std::|<?alloc_per_request)")


def frames(sample):
    names = re.findall(r"^\s+\d+: (.+)$", sample, re.M)
    names = [re.sub(r"::h[0-9a-f]{16}$", "", n) for n in names]
    return [n for n in names if not ALLOCATOR.match(n)]


def main():
    path, per_request = sys.argv[1], float(sys.argv[2])
    samples = open(path, encoding="utf-8").read().split("=====\n")[1:]
    sites = collections.Counter()
    for sample in samples:
        names = frames(sample)
        ours = next((n for n in names if "context_relay" in n), "(outside the workspace)")
        sites[(names[0] if names else "?")[:100] + "  <-  " + ours[:140]] += 1
    for site, n in sites.most_common(80):
        print(f"{n * per_request / len(samples):6.1f}  {site}")


if __name__ == "__main__":
    main()
