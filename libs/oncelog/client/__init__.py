"""Typed clients over the generated stubs."""
