"""nemo-rl-gke values generator: `python -m generator --gpu b200|h200`."""
