"""Offline data: write the experience rollout workers sample to files, and read it back
to train on (``input`` / ``output`` config keys), with off-policy estimates of how the
current policy would do.

* Output: `JsonWriter` (JSON lines, columns packed with lz4 + base64) and
  `ParquetWriter` (pyarrow), or an `OutputWriter` of your own.
* Input: `JsonReader` (``.json`` and ``.parquet`` files), `MixedInput`
  (``{"sampler": 0.4, "/data": 0.6}``), `ShuffledInput` (``shuffle_buffer_size``), or an
  `InputReader` of your own.
* Estimators: `ImportanceSamplingEstimator`, `WeightedImportanceSamplingEstimator`.

The file format is described in `rayfield.rllib.offline.columns`; nothing is pickled.
"""

from __future__ import annotations

from rayfield.rllib.offline.columns import OfflineDataError, decode_batch, encode_batch
from rayfield.rllib.offline.estimators import (
    ImportanceSamplingEstimator,
    OffPolicyEstimate,
    OffPolicyEstimator,
    WeightedImportanceSamplingEstimator,
)
from rayfield.rllib.offline.input_reader import InputReader, SamplerInput
from rayfield.rllib.offline.io_context import IOContext
from rayfield.rllib.offline.json_reader import JsonReader
from rayfield.rllib.offline.json_writer import JsonWriter
from rayfield.rllib.offline.mixed_input import MixedInput, ShuffledInput
from rayfield.rllib.offline.output_writer import NoopOutput, OutputWriter
from rayfield.rllib.offline.parquet import ParquetWriter

ParquetReader = JsonReader
"""Reads Parquet files too (by their ``.parquet`` suffix)."""

__all__ = [
    "IOContext",
    "ImportanceSamplingEstimator",
    "InputReader",
    "JsonReader",
    "JsonWriter",
    "MixedInput",
    "NoopOutput",
    "OffPolicyEstimate",
    "OffPolicyEstimator",
    "OfflineDataError",
    "OutputWriter",
    "ParquetReader",
    "ParquetWriter",
    "SamplerInput",
    "ShuffledInput",
    "WeightedImportanceSamplingEstimator",
    "decode_batch",
    "encode_batch",
]
