"""rehearse/job."""
