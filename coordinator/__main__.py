"""``python -m coordinator``: the ``rhaipool`` command line."""

from coordinator._cli import main

main()
