"""GKE choices the values file, `validate` and the infra script share: the cluster's mode and
how GPU nodes are obtained."""

from __future__ import annotations

MODES = ("standard", "autopilot")
DEFAULT_MODE = "standard"
PROVISIONING = ("spot", "on-demand", "flex-start", "reservation")
DEFAULT_PROVISIONING = "spot"
