"""`JsonWriter`: experience batches as JSON lines, in files that roll over at a size."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from rayfield.rllib.offline.columns import encode_batch
from rayfield.rllib.offline.io_context import IOContext
from rayfield.rllib.offline.output_writer import OutputWriter
from rayfield.util import private_files

__all__ = ["DEFAULT_MAX_FILE_SIZE", "JsonWriter", "output_file_name"]

DEFAULT_MAX_FILE_SIZE = 64 * 1024 * 1024


def output_file_name(directory: Path, worker_index: int, suffix: str, start: int = 0) -> Path:
    """``output-<YYYY-mm-dd_HH-MM-SS>_worker-<i>_<n><suffix>`` in `directory`, with the
    first ``n >= start`` that names no existing file (RLlib's file names)."""
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    n = start
    while True:
        path = directory / f"output-{stamp}_worker-{worker_index}_{n}{suffix}"
        if not path.exists():
            return path
        n += 1


class JsonWriter(OutputWriter):
    """Writes each batch as one JSON line (format: `rayfield.rllib.offline.columns`).

    Files are named ``output-<date>_worker-<worker_index>_<n>.json``; a new one starts
    when the next line would take the current one past `max_file_size` bytes. The
    directory is made 0700 and the files 0600 (`rayfield.util.private_files`); each line
    is flushed when written, so a reader (or a crash) sees whole lines only.

    Args:
        path: the output directory (``~`` is expanded; made if missing).
        ioctx: gives the worker index for the file names (default 0).
        max_file_size: bytes per file before rolling over (>= 1).
        compress_columns: columns written packed (lz4 + base64 by default); ``[]``
            writes plain lists, human-readable.
        codec: the packing codec, ``"lz4"``, ``"zlib"`` or ``"raw"``.

    Raises:
        ValueError: `max_file_size` < 1 or an unknown codec.
        UnsafeFileError: `path` or a directory above it is another user's or writable
            by others.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        ioctx: IOContext | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        compress_columns: Any = ("obs", "new_obs"),
        codec: str = "lz4",
    ) -> None:
        from rayfield.rllib.offline.columns import CODECS

        if int(max_file_size) < 1:
            raise ValueError(f"output_max_file_size must be >= 1, got {max_file_size}")
        if codec not in CODECS:
            raise ValueError(f"unknown output codec {codec!r}: use one of {', '.join(CODECS)}")
        self.ioctx = ioctx or IOContext()
        self.path = private_files.ensure_private_dir(
            os.path.expanduser(os.fspath(path)), what="the offline output directory"
        )
        self.max_file_size = int(max_file_size)
        self.compress_columns = list(compress_columns or [])
        self.codec = codec
        self.file_index = 0
        self.cur_path: Path | None = None
        self._file: Any = None
        self._size = 0

    def write(self, sample_batch: Any) -> None:
        line = json.dumps(encode_batch(sample_batch, self.compress_columns, self.codec)) + "\n"
        data = line.encode()
        if self._file is None or (self._size and self._size + len(data) > self.max_file_size):
            self._roll()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def _roll(self) -> None:
        self.close()
        self.cur_path = output_file_name(
            Path(self.path), self.ioctx.worker_index, ".json", self.file_index
        )
        self.file_index = int(self.cur_path.stem.rsplit("_", 1)[1]) + 1
        self._file = private_files.open_private(self.cur_path, "wb", what="the offline output file")
        self._size = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __repr__(self) -> str:
        return f"JsonWriter({str(self.path)!r})"
