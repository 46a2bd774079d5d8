"""Managed Lustre facts the values file, `validate` and the infra script share: the capacities each
performance tier offers, and where an instance lives.

Sources (Google Cloud documentation):
- "Performance tiers", https://docs.cloud.google.com/managed-lustre/docs/performance-tiers, and
  "Increase the capacity of a Managed Lustre instance",
  https://docs.cloud.google.com/managed-lustre/docs/increase-capacity: per tier (MB/s per TiB of
  capacity) the minimum and maximum capacity and the step size; a capacity is a multiple of the
  step. The 1000, 500 and 250 MB/s tiers step by a larger size above a threshold (1000 MB/s: 9,000
  GiB up to 1,530,000 GiB, then 72,000 GiB). The Dynamic tier (25 MB/s per TiB aggregate) is chosen
  without a per-unit throughput (gcloud --dynamic-tier-options-mode). Earlier versions of these
  pages gave lower maxima and one step per tier; every size they allowed is allowed here.
- "Managed Lustre CSI driver reference",
  https://docs.cloud.google.com/managed-lustre/docs/lustre-csi-driver-reference: "Managed Lustre
  instances are zonal resources". GoogleCloudPlatform/lustre-csi-driver, docs/preprov-guide.md
  ("Importing an Existing Lustre Instance"): a static PersistentVolume's volumeHandle holds "the
  project ID, zone, and Lustre instance name", PROJECT/ZONE/INSTANCE.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LustreTier:
    name: str
    min_gib: int
    max_gib: int
    step_gib: int
    threshold_gib: int = 0  # above it (when set) capacities are multiples of large_step_gib
    large_step_gib: int = 0

    def step_at(self, gib: int) -> int:
        return self.large_step_gib if self.threshold_gib and gib > self.threshold_gib else self.step_gib

    def allows(self, gib: int) -> bool:
        return self.min_gib <= gib <= self.max_gib and gib % self.step_at(gib) == 0

    def neighbours(self, gib: int) -> tuple[int | None, int | None]:
        """The sizes of this tier just below and just above `gib` (None where there is none)."""
        step = self.step_at(gib)
        below, above = gib // step * step, (gib // step + 1) * step
        if step == self.large_step_gib:
            below = max(below, self.threshold_gib)  # the last size of the small steps
        below = min(below, self.max_gib)
        return (below if self.allows(below) else None, above if self.allows(above) else None)


# Per-unit storage throughput (MB/s per TiB) -> its tier.
LUSTRE_TIERS = {
    1000: LustreTier("1000 MB/s per TiB", 9_000, 10_008_000, 9_000, 1_530_000, 72_000),
    500: LustreTier("500 MB/s per TiB", 18_000, 20_016_000, 18_000, 3_060_000, 144_000),
    250: LustreTier("250 MB/s per TiB", 36_000, 40_032_000, 36_000, 6_120_000, 288_000),
    125: LustreTier("125 MB/s per TiB", 72_000, 12_240_000, 72_000),
}
LUSTRE_DYNAMIC = LustreTier("Dynamic", 472_000, 84_016_000, 472_000)
LUSTRE_THROUGHPUTS = tuple(sorted(LUSTRE_TIERS))
# Every tier an existing instance may have: the values file names no tier (the chart needs none).
ALL_TIERS = (*LUSTRE_TIERS.values(), LUSTRE_DYNAMIC)
# The smallest instance of any tier: a static volume below it cannot exist.
LUSTRE_SMALLEST_GIB = min(t.min_gib for t in ALL_TIERS)


def nearest_sizes(gib: int, tiers: tuple[LustreTier, ...] = ALL_TIERS) -> tuple[int | None, int | None]:
    """The sizes of these tiers just below and just above `gib` (None where there is none)."""
    near = [n for t in tiers for n in t.neighbours(gib) if n is not None]
    return max((n for n in near if n < gib), default=None), min((n for n in near if n > gib), default=None)


def sizes_text(gib: int, tiers: tuple[LustreTier, ...] = ALL_TIERS) -> str:
    """'9000 GiB or 18000 GiB': the nearest sizes these tiers allow."""
    return " or ".join(f"{n} GiB" for n in nearest_sizes(gib, tiers) if n is not None)
