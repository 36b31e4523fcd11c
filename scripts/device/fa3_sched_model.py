#!/usr/bin/env python3
"""List-scheduling model of the FA3 prefill grid (docs/flash-attn-notes.md, sixth session's plan).

Each CTA costs its KV tiles plus a fixed cost (in tile-times); CTAs start in grid order on the first free SM.
Compares the grid orders and the persistent variant (a smaller fixed cost) for causal prefills of 32 query
heads.  Usage: python3 scripts/device/fa3_sched_model.py [SMS]
"""
import heapq
import sys


def makespan(jobs, sms):
    free = [0.0] * sms
    end = 0.0
    for cost in jobs:
        t = heapq.heappop(free) + cost
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def tiles(seqs, length, bm, bn):
    """KV tiles of each causal query block, costliest first (the plan's order)."""
    out = [((min(length, (m + 1) * bm) - 1) // bn + 1) for _ in range(seqs) for m in range((length + bm - 1) // bm)]
    return sorted(out, reverse=True)


def main():
    sms = int(sys.argv[1]) if len(sys.argv) > 1 else 132
    heads, fixed, fixed_persistent = 32, 2.0, 0.5
    print(f"{sms} SMs, {heads} heads, fixed cost {fixed} tiles per CTA ({fixed_persistent} persistent)")
    for seqs, length, bm, bn in [(1, 2048, 128, 128), (1, 4096, 128, 128), (2, 4096, 128, 128),
                                 (4, 8192, 128, 128), (4, 8192, 192, 128), (4, 8192, 128, 80)]:
        t = tiles(seqs, length, bm, bn)
        items_first = [c + fixed for _ in range(heads) for c in t]  # grid (item, head), items fastest
        heads_first = [c + fixed for c in t for _ in range(heads)]  # heads fastest
        persistent = [c + fixed_persistent for c in t for _ in range(heads)]
        bound = sum(c for c in t) * heads / sms
        print(f"{seqs} x {length:5d} BM {bm:3d} BN {bn:3d}: items-fastest {makespan(items_first, sms):7.0f}  "
              f"heads-fastest {makespan(heads_first, sms):7.0f}  persistent {makespan(persistent, sms):7.0f}  "
              f"(work / SMs {bound:7.0f})")


if __name__ == "__main__":
    main()
