"""``python -m oncelog.kafka_gateway``."""

import sys

# kio registers Hypothesis strategies for its types when Hypothesis is importable (a development install), and
# importing Hypothesis creates .hypothesis/ in the working directory; the service never needs it.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from oncelog.kafka_gateway.app import main  # noqa: E402

sys.exit(main())
