"""``python -m oncelog.kafka_gateway``."""

import sys

from oncelog.kafka_gateway.app import main

sys.exit(main())
