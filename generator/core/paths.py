"""Where the checkout's files are: the repository root and the chart. Standard library only
(scripts/bootstrap.sh runs generator/helm/install.py before any dependency is installed)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "nemo-rl-gke"
