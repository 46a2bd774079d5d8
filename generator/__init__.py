"""nemo-rl-gke values generator: `python -m generator --gpu GPU` (a profile of profiles.py)."""
