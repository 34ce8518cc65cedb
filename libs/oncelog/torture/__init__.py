"""Fault harness history and checker for exactly-once claims (docs/design/torture.md)."""
