#!/usr/bin/env python3
"""Heap allocations per request, counted from a callgrind output file.

    benches/alloc_calls.py callgrind.out REQUESTS

Sums the calls callgrind recorded into the allocators' entry points (glibc's `malloc`,
`calloc`, `realloc`, `posix_memalign`, `aligned_alloc`; mimalloc's `mi_*alloc*_aligned` and
`mi_*alloc`, which the `mimalloc` crate's global allocator calls), leaving out the calls an
allocator makes into itself, and prints them divided by REQUESTS. A `realloc` counts as one
allocation, as in `crates/gateway/tests/alloc_per_request.rs`. With `--instr-atstart=no`,
callgrind records calls only while counting is on, so the figure covers the counted window.
"""
import re
import sys

ENTRY = re.compile(
    r"^(malloc|calloc|realloc|posix_memalign|aligned_alloc|memalign"
    r"|mi_(malloc|zalloc|calloc|realloc)(_aligned)?)$"
)


def main():
    path, requests = sys.argv[1], int(sys.argv[2])
    names = {}

    def name(field):
        # Callgrind compresses names: "(id) name" the first time, "(id)" after.
        m = re.match(r"\((\d+)\)(?: (.*))?", field)
        if not m:
            return field
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), "?")

    def base(fn):
        return (fn or "").split("'")[0]

    caller = callee = None
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                caller = name(line[3:].strip())
            elif line.startswith("cfn="):
                callee = name(line[4:].strip())
            elif line.startswith("calls=") and callee is not None:
                if ENTRY.match(base(callee)) and not ENTRY.match(base(caller)):
                    total += int(line[6:].split()[0])
    print(f"{total / max(requests, 1):.1f}")


if __name__ == "__main__":
    main()
