"""privacy-ledger: a stateful privacy-budget accountant service."""

__version__ = "0.1.0"
