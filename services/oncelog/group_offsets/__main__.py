"""``python -m oncelog.group_offsets``."""

import sys

from oncelog.group_offsets.app import main

sys.exit(main())
