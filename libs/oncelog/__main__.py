"""``python -m oncelog``: the ``oncelog`` command (the same as the ``oncelog`` script)."""

from oncelog.cli.main import main

main()
