"""The ``rayfield`` command: one module per command group (``start``, ``stop``, ``status``)."""
