"""Services: one function per transaction (charge, reserve, commit, release, ...).

Each public function takes the ``Database`` and plain values, opens exactly one transaction
with ``db.write()`` or ``db.read()``, and returns plain data (dicts ready for JSON) or raises a
``ProblemError`` subclass from ``errors``. Routers stay thin: parse, call, return.
"""
