"""The ``oncelog`` command line."""

import os
import sys

# grpc's core library writes its own log lines to stderr (for example an epoll error while a client's event loop
# shuts down after its command finished). The command prints each failure once, as one line; `oncelog -v` shows
# the libraries' logs, grpc's included. Read by grpc when it is first imported, so set before anything imports it.
if not {"-v", "--verbose"} & set(sys.argv[1:]):
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from oncelog.cli.main import app, main

__all__ = ["app", "main"]
