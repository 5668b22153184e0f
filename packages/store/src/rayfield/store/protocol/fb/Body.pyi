from __future__ import annotations

import flatbuffers
import numpy as np

import typing
from typing import cast

uoffset: typing.TypeAlias = flatbuffers.number_types.UOffsetTFlags.py_type

class Body(object):
  NONE = cast(int, ...)
  Hello = cast(int, ...)
  HelloReply = cast(int, ...)
  ErrorReply = cast(int, ...)
  OkReply = cast(int, ...)
  CreateRequest = cast(int, ...)
  CreateReply = cast(int, ...)
  PutRequest = cast(int, ...)
  SealRequest = cast(int, ...)
  AbortRequest = cast(int, ...)
  GetRequest = cast(int, ...)
  GetReply = cast(int, ...)
  ReleaseRequest = cast(int, ...)
  ContainsRequest = cast(int, ...)
  ContainsReply = cast(int, ...)
  DeleteRequest = cast(int, ...)
  DeleteReply = cast(int, ...)
  ListRequest = cast(int, ...)
  ListReply = cast(int, ...)
  SubscribeRequest = cast(int, ...)
  ObjectNotification = cast(int, ...)
  StatsRequest = cast(int, ...)
  StatsReply = cast(int, ...)
  SubmitTaskRequest = cast(int, ...)
  RegisterWorkerRequest = cast(int, ...)
  TaskDispatch = cast(int, ...)
  TaskDoneRequest = cast(int, ...)
  WorkerBlockedRequest = cast(int, ...)
  WaitRequest = cast(int, ...)
  WaitReply = cast(int, ...)
  PinRequest = cast(int, ...)
  KillActorRequest = cast(int, ...)
  CancelTaskRequest = cast(int, ...)
  CancelTaskReply = cast(int, ...)
  NodeStateRequest = cast(int, ...)
  NodeStateReply = cast(int, ...)

