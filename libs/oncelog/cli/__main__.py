"""``python -m oncelog.cli``: the ``oncelog`` command."""

from oncelog.cli.main import main

main()
