"""``python -m oncelog.pid_allocator``."""

import sys

from oncelog.pid_allocator.app import main

sys.exit(main())
