"""``python -m app.cli``: the ``privacy-ledger`` command."""

from app.cli import main

main()
