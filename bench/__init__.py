"""Benchmarks: figures as ratios against baselines measured in the same run (never asserted in tests)."""
