"""``python -m strait`` runs the ``strait`` command."""

from strait.cli.main import main

main()
