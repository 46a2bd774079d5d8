"""nemo_rl."""
