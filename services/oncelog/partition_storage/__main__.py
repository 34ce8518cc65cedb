"""``python -m oncelog.partition_storage``."""

import sys

from oncelog.partition_storage.app import main

sys.exit(main())
