"""The per-process runtime of a driver or worker: objects, tasks, actors' handles, the
worker loop, and the serial ``local_mode`` runtime. Imports only ``_private.common``,
``_private.context`` and the driver-side cluster operations (``_private.driver``)."""
