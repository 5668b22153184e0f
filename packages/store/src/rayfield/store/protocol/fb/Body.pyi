from __future__ import annotations

import flatbuffers
import numpy as np

import typing
from flatbuffers import table
from rayfield.store.protocol.fb.AbortRequest import AbortRequest
from rayfield.store.protocol.fb.ActorHandlesRequest import ActorHandlesRequest
from rayfield.store.protocol.fb.CancelTaskReply import CancelTaskReply
from rayfield.store.protocol.fb.CancelTaskRequest import CancelTaskRequest
from rayfield.store.protocol.fb.ContainsReply import ContainsReply
from rayfield.store.protocol.fb.ContainsRequest import ContainsRequest
from rayfield.store.protocol.fb.CreateReply import CreateReply
from rayfield.store.protocol.fb.CreateRequest import CreateRequest
from rayfield.store.protocol.fb.DeleteReply import DeleteReply
from rayfield.store.protocol.fb.DeleteRequest import DeleteRequest
from rayfield.store.protocol.fb.ErrorReply import ErrorReply
from rayfield.store.protocol.fb.GetReply import GetReply
from rayfield.store.protocol.fb.GetRequest import GetRequest
from rayfield.store.protocol.fb.Hello import Hello
from rayfield.store.protocol.fb.HelloReply import HelloReply
from rayfield.store.protocol.fb.KillActorRequest import KillActorRequest
from rayfield.store.protocol.fb.ListReply import ListReply
from rayfield.store.protocol.fb.ListRequest import ListRequest
from rayfield.store.protocol.fb.NodeStateReply import NodeStateReply
from rayfield.store.protocol.fb.NodeStateRequest import NodeStateRequest
from rayfield.store.protocol.fb.ObjectNotification import ObjectNotification
from rayfield.store.protocol.fb.OkReply import OkReply
from rayfield.store.protocol.fb.PinRequest import PinRequest
from rayfield.store.protocol.fb.PutRequest import PutRequest
from rayfield.store.protocol.fb.RegisterWorkerRequest import RegisterWorkerRequest
from rayfield.store.protocol.fb.ReleaseRequest import ReleaseRequest
from rayfield.store.protocol.fb.SealRequest import SealRequest
from rayfield.store.protocol.fb.StatsReply import StatsReply
from rayfield.store.protocol.fb.StatsRequest import StatsRequest
from rayfield.store.protocol.fb.SubmitTaskRequest import SubmitTaskRequest
from rayfield.store.protocol.fb.SubscribeRequest import SubscribeRequest
from rayfield.store.protocol.fb.TaskDispatch import TaskDispatch
from rayfield.store.protocol.fb.TaskDoneRequest import TaskDoneRequest
from rayfield.store.protocol.fb.WaitReply import WaitReply
from rayfield.store.protocol.fb.WaitRequest import WaitRequest
from rayfield.store.protocol.fb.WorkerBlockedRequest import WorkerBlockedRequest
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
  ActorHandlesRequest = cast(int, ...)
def BodyCreator(union_type: typing.Literal[Body.NONE, Body.Hello, Body.HelloReply, Body.ErrorReply, Body.OkReply, Body.CreateRequest, Body.CreateReply, Body.PutRequest, Body.SealRequest, Body.AbortRequest, Body.GetRequest, Body.GetReply, Body.ReleaseRequest, Body.ContainsRequest, Body.ContainsReply, Body.DeleteRequest, Body.DeleteReply, Body.ListRequest, Body.ListReply, Body.SubscribeRequest, Body.ObjectNotification, Body.StatsRequest, Body.StatsReply, Body.SubmitTaskRequest, Body.RegisterWorkerRequest, Body.TaskDispatch, Body.TaskDoneRequest, Body.WorkerBlockedRequest, Body.WaitRequest, Body.WaitReply, Body.PinRequest, Body.KillActorRequest, Body.CancelTaskRequest, Body.CancelTaskReply, Body.NodeStateRequest, Body.NodeStateReply, Body.ActorHandlesRequest], table: table.Table) -> typing.Union[None, Hello, HelloReply, ErrorReply, OkReply, CreateRequest, CreateReply, PutRequest, SealRequest, AbortRequest, GetRequest, GetReply, ReleaseRequest, ContainsRequest, ContainsReply, DeleteRequest, DeleteReply, ListRequest, ListReply, SubscribeRequest, ObjectNotification, StatsRequest, StatsReply, SubmitTaskRequest, RegisterWorkerRequest, TaskDispatch, TaskDoneRequest, WorkerBlockedRequest, WaitRequest, WaitReply, PinRequest, KillActorRequest, CancelTaskRequest, CancelTaskReply, NodeStateRequest, NodeStateReply, ActorHandlesRequest]: ...

