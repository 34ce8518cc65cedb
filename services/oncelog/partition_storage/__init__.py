"""Partition storage: segment logs, producer state, transaction markers and the last stable offset."""
