"""``python -m oncelog.txn_coordinator``."""

import sys

from oncelog.txn_coordinator.app import main

sys.exit(main())
