from __future__ import annotations

import flatbuffers
import numpy as np

import typing
from typing import cast

uoffset: typing.TypeAlias = flatbuffers.number_types.UOffsetTFlags.py_type

class ErrorCode(object):
  Ok = cast(int, ...)
  ProtocolMismatch = cast(int, ...)
  InvalidRequest = cast(int, ...)
  ObjectExists = cast(int, ...)
  ObjectNotFound = cast(int, ...)
  ObjectNotSealed = cast(int, ...)
  ObjectAlreadySealed = cast(int, ...)
  StoreFull = cast(int, ...)
  TooLarge = cast(int, ...)
  NotOwner = cast(int, ...)
  Timeout = cast(int, ...)
  Internal = cast(int, ...)
  NotAWorker = cast(int, ...)

