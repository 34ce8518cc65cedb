"""The ``oncelog`` command line."""

from oncelog.cli.main import app, main

__all__ = ["app", "main"]
