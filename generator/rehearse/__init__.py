"""rehearse."""
