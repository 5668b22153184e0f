"""Offline data as Parquet files (pyarrow): one column per `SampleBatch` column.

A file holds rows of single-agent batches. Numeric columns keep their dtype; a column
with more than one dimension (``obs`` of shape ``[rows, 4]``) is a nested fixed-size
list, so its shape is part of the schema; ``infos`` is a string column of JSON objects
(the schema's metadata ``rayfield.json_columns`` names such columns). Nothing is pickled.

`ParquetWriter` keeps the batches it is given and writes them as one file (atomically,
0600 in a 0700 directory) once they reach ``output_max_file_size`` bytes, and the rest
when it is closed (the rollout worker closes its writer when it stops).

pyarrow is imported on first use: ``pip install 'rayfield-rllib[parquet]'``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rayfield.rllib.offline.columns import OfflineDataError
from rayfield.rllib.offline.io_context import IOContext
from rayfield.rllib.offline.json_writer import DEFAULT_MAX_FILE_SIZE, output_file_name
from rayfield.rllib.offline.output_writer import OutputWriter
from rayfield.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from rayfield.util import private_files

__all__ = ["ParquetWriter", "batch_to_table", "read_parquet_batches", "table_to_batch"]

JSON_COLUMNS_KEY = b"rayfield.json_columns"
INSTALL_HINT = "pip install 'rayfield-rllib[parquet]' (pyarrow)"


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet

        del pyarrow  # imported for pa.parquet
    except ImportError:
        raise ImportError(f"Parquet offline data needs pyarrow: {INSTALL_HINT}") from None
    return pa


def batch_to_table(batch: SampleBatch) -> Any:
    """A `SampleBatch` as a ``pyarrow.Table`` (see the module docstring).

    Raises:
        TypeError: a `MultiAgentBatch` (write those as JSON).
        ValueError: a column of strings or other non-numeric objects besides dicts.
    """
    pa = _pa()
    if isinstance(batch, MultiAgentBatch):
        raise TypeError(
            "Parquet output holds single-agent batches: write multi-agent data as JSON "
            "(output_config={'format': 'json'})"
        )
    arrays, names, json_cols = [], [], []
    for name, col in batch.items():
        if col.dtype == object:
            from rayfield.rllib.agents.checkpoints import to_json_safe

            arrays.append(pa.array([json.dumps(to_json_safe(v)) for v in col], pa.string()))
            json_cols.append(name)
        elif col.dtype.kind in "biuf":
            flat = pa.array(np.ascontiguousarray(col).reshape(-1))
            for size in reversed(col.shape[1:]):
                flat = pa.FixedSizeListArray.from_arrays(flat, int(size))
            arrays.append(flat)
        else:
            raise ValueError(f"column {name!r} of dtype {col.dtype} cannot be written to Parquet")
        names.append(name)
    table = pa.Table.from_arrays(arrays, names=names)
    return table.replace_schema_metadata({JSON_COLUMNS_KEY: json.dumps(json_cols).encode()})


def _column_to_numpy(chunked: Any, name: str, where: str) -> np.ndarray:
    pa = _pa()
    arr = chunked.combine_chunks()
    dims = []
    typ = arr.type
    while pa.types.is_fixed_size_list(typ):
        dims.append(typ.list_size)
        typ = typ.value_type
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)):
        raise OfflineDataError(where, f"column {name!r} has type {arr.type}, not numeric")
    if arr.null_count:
        raise OfflineDataError(where, f"column {name!r} has {arr.null_count} null values")
    flat = arr
    for _ in dims:
        flat = flat.flatten()
    values = flat.to_numpy(zero_copy_only=False).copy()  # writable, for torch
    return values.reshape(len(arr), *dims)


def table_to_batch(table: Any, where: str) -> SampleBatch:
    """The `SampleBatch` of a table `batch_to_table` wrote.

    Raises:
        OfflineDataError: a column that is neither numeric nor JSON objects.
    """
    pa = _pa()
    meta = table.schema.metadata or {}
    try:
        json_cols = set(json.loads(meta.get(JSON_COLUMNS_KEY, b"[]")))
    except json.JSONDecodeError:
        raise OfflineDataError(where, "bad rayfield.json_columns metadata") from None
    cols: dict[str, np.ndarray] = {}
    for name in table.column_names:
        chunked = table.column(name)
        if name in json_cols and pa.types.is_string(chunked.type):
            out = np.empty(len(chunked), dtype=object)
            try:
                out[:] = [json.loads(s) for s in chunked.to_pylist()]
            except (TypeError, json.JSONDecodeError) as exc:
                raise OfflineDataError(where, f"column {name!r}: bad JSON ({exc})") from None
            cols[name] = out
        else:
            cols[name] = _column_to_numpy(chunked, name, where)
    return SampleBatch(cols)


def read_parquet_batches(path: str) -> Iterator[SampleBatch]:
    """The batches of one Parquet file, one per row group.

    Raises:
        OfflineDataError: not a Parquet file, or a column that is not numeric / JSON.
    """
    pa = _pa()
    try:
        reader = pa.parquet.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise OfflineDataError(path, f"not a readable Parquet file ({exc})") from None
    with reader:
        for group in range(reader.num_row_groups):
            yield table_to_batch(reader.read_row_group(group), f"{path}: row group {group}")


class ParquetWriter(OutputWriter):
    """Writes batches to Parquet files (see the module docstring).

    Args:
        path: the output directory (``~`` expanded; made 0700 if missing).
        ioctx: gives the worker index for the file names.
        max_file_size: in-memory bytes of batches per file (>= 1).

    Raises:
        ImportError: pyarrow is not installed.
        ValueError: `max_file_size` < 1.
        UnsafeFileError: `path` or a directory above it is not this user's alone.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        ioctx: IOContext | None = None,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    ) -> None:
        _pa()
        if int(max_file_size) < 1:
            raise ValueError(f"output_max_file_size must be >= 1, got {max_file_size}")
        self.ioctx = ioctx or IOContext()
        self.path = private_files.ensure_private_dir(
            os.path.expanduser(os.fspath(path)), what="the offline output directory"
        )
        self.max_file_size = int(max_file_size)
        self.file_index = 0
        self._pending: list[Any] = []
        self._pending_bytes = 0
        self.files: list[Path] = []

    def write(self, sample_batch: Any) -> None:
        table = batch_to_table(sample_batch)
        if self._pending and not table.schema.equals(self._pending[0].schema):
            self.flush()  # a file has one schema: other columns start a new file
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= self.max_file_size:
            self.flush()

    def flush(self) -> None:
        """Write the batches kept so far as one file (one row group per batch)."""
        if not self._pending:
            return
        pa = _pa()
        index = self.ioctx.worker_index
        path = output_file_name(Path(self.path), index, ".parquet", self.file_index)
        self.file_index = int(path.stem.rsplit("_", 1)[1]) + 1
        sink = pa.BufferOutputStream()
        schema = self._pending[0].schema
        with pa.parquet.ParquetWriter(sink, schema) as writer:
            for table in self._pending:
                writer.write_table(table)
        with private_files.atomic_write(path) as f:
            f.write(sink.getvalue().to_pybytes())
        self.files.append(path)
        self._pending, self._pending_bytes = [], 0

    def close(self) -> None:
        self.flush()

    def __repr__(self) -> str:
        return f"ParquetWriter({str(self.path)!r})"
