"""group-offsets service."""
