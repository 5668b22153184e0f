"""Basic types every other layer builds on: ids, constants, serialization, task options,
session files, code packing and the event log. Modules here import nothing of rayfield
above this package (``rayfield.exceptions`` and ``rayfield.store`` only)."""
