"""Managed Lustre's sizes: the smallest capacity of each throughput tier (MB/s per TiB);
capacities are multiples of it."""

from __future__ import annotations

LUSTRE_MIN_GIB = {1000: 9000, 500: 18000, 250: 36000, 125: 72000}
LUSTRE_THROUGHPUTS = tuple(sorted(LUSTRE_MIN_GIB))
# The smallest instance of any tier: a static volume below it cannot exist.
LUSTRE_SMALLEST_GIB = min(LUSTRE_MIN_GIB.values())
