"""The compute classes a GKE Autopilot pod can select with `cloud.google.com/compute-class`
without the cluster holding a ComputeClass object of its own.

Sources (GKE documentation):
- "About built-in ComputeClasses in GKE"
  (https://docs.cloud.google.com/kubernetes-engine/docs/concepts/about-built-in-compute-classes):
  GKE installs `autopilot` (the Autopilot default) and `autopilot-spot` in the cluster.
- "Compute classes in Autopilot"
  (https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-compute-classes): the
  classes Autopilot offers for specific hardware, `Accelerator`, `Balanced`, `Performance` and
  `Scale-Out`; the general-purpose platform is what a pod gets without a class and cannot be
  selected by name.
- "About custom ComputeClasses": any other class is a `ComputeClass` object
  (cloud.google.com/v1) the cluster administrator deploys; its name is a Kubernetes object name,
  lower case (RFC 1123), so a class name with an upper-case letter that is not built in can never
  exist.
"""

from __future__ import annotations

LABEL = "cloud.google.com/compute-class"
BUILT_IN = ("autopilot", "autopilot-spot", "Accelerator", "Balanced", "Performance", "Scale-Out")


def built_in(name: str) -> bool:
    return name in BUILT_IN


def could_be_custom(name: str) -> bool:
    """A ComputeClass object could have this name (lower-case letters, digits, '-' and '.')."""
    return bool(name) and name == name.lower()


def closest(name: str) -> str | None:
    """The built-in class the name differs from only in case or separators, e.g. performance, scale_out."""
    squash = name.lower().replace("-", "").replace("_", "")
    return next((b for b in BUILT_IN if b.lower().replace("-", "") == squash and b != name), None)
