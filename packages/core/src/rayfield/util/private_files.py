"""Files only their user can touch: how every rayfield package keeps its files.

rayfield-core keeps its session files this way, and the libraries use the same functions
for theirs (the autoscaler's cluster directories and tokens, Tune's experiment
directories, RLlib's and rayfield-sgd's checkpoints), so that another local user can
neither read them nor put files of their own where rayfield will read them.

A path is trusted when:

- this user owns it and neither group nor others can write it (a symlink must be this
  user's, and its target is checked the same way);
- every directory above it is owned by this user or by root, and one that group or
  others can write has the sticky bit (as ``/tmp``); otherwise that directory's owner
  could rename the path away and put their own in its place.

Directories are created 0700 and files 0600; reads and writes open with ``O_NOFOLLOW``
and check the open file descriptor. What fails a check raises
:class:`rayfield.exceptions.UnsafeFileError` (a ``PermissionError``), whose message names
the path, its owner and mode, and what to do.

Example:
    from rayfield.util import private_files

    d = private_files.ensure_private_dir("/tmp/myapp-1000/run1")   # 0700
    private_files.write_json(d / "state.json", {"step": 3})          # 0600, atomic
    state = private_files.read_json(d / "state.json")
    with private_files.open_private(d / "log.txt", "a") as f:        # 0600, appended
        f.write("step 3\\n")

Only the owner check protects against other users: a file this user copied from
elsewhere passes it, so nothing read here should be unpickled (keep JSON, or tensors read
with ``torch.load(weights_only=True)``).
"""

from __future__ import annotations

from rayfield._private.common.private_files import (
    atomic_write,
    check_ancestors,
    check_owned,
    ensure_private_dir,
    open_private,
    read_bytes,
    read_json,
    read_text,
    write_bytes,
    write_json,
    write_text,
)
from rayfield.exceptions import UnsafeFileError

__all__ = [
    "UnsafeFileError",
    "atomic_write",
    "check_ancestors",
    "check_owned",
    "ensure_private_dir",
    "open_private",
    "read_bytes",
    "read_json",
    "read_text",
    "write_bytes",
    "write_json",
    "write_text",
]
