from __future__ import annotations

import flatbuffers
import numpy as np

import typing
from flatbuffers import table
from rayfield.store.protocol.fb.AbortRequest import AbortRequestT
from rayfield.store.protocol.fb.ActorHandlesRequest import ActorHandlesRequestT
from rayfield.store.protocol.fb.Body import Body
from rayfield.store.protocol.fb.CancelTaskReply import CancelTaskReplyT
from rayfield.store.protocol.fb.CancelTaskRequest import CancelTaskRequestT
from rayfield.store.protocol.fb.ContainsReply import ContainsReplyT
from rayfield.store.protocol.fb.ContainsRequest import ContainsRequestT
from rayfield.store.protocol.fb.CreateReply import CreateReplyT
from rayfield.store.protocol.fb.CreateRequest import CreateRequestT
from rayfield.store.protocol.fb.DeleteReply import DeleteReplyT
from rayfield.store.protocol.fb.DeleteRequest import DeleteRequestT
from rayfield.store.protocol.fb.ErrorReply import ErrorReplyT
from rayfield.store.protocol.fb.GetReply import GetReplyT
from rayfield.store.protocol.fb.GetRequest import GetRequestT
from rayfield.store.protocol.fb.Hello import HelloT
from rayfield.store.protocol.fb.HelloReply import HelloReplyT
from rayfield.store.protocol.fb.KillActorRequest import KillActorRequestT
from rayfield.store.protocol.fb.ListReply import ListReplyT
from rayfield.store.protocol.fb.ListRequest import ListRequestT
from rayfield.store.protocol.fb.NodeStateReply import NodeStateReplyT
from rayfield.store.protocol.fb.NodeStateRequest import NodeStateRequestT
from rayfield.store.protocol.fb.ObjectNotification import ObjectNotificationT
from rayfield.store.protocol.fb.OkReply import OkReplyT
from rayfield.store.protocol.fb.PinRequest import PinRequestT
from rayfield.store.protocol.fb.PutRequest import PutRequestT
from rayfield.store.protocol.fb.RegisterWorkerRequest import RegisterWorkerRequestT
from rayfield.store.protocol.fb.ReleaseRequest import ReleaseRequestT
from rayfield.store.protocol.fb.SealRequest import SealRequestT
from rayfield.store.protocol.fb.StatsReply import StatsReplyT
from rayfield.store.protocol.fb.StatsRequest import StatsRequestT
from rayfield.store.protocol.fb.SubmitTaskRequest import SubmitTaskRequestT
from rayfield.store.protocol.fb.SubscribeRequest import SubscribeRequestT
from rayfield.store.protocol.fb.TaskDispatch import TaskDispatchT
from rayfield.store.protocol.fb.TaskDoneRequest import TaskDoneRequestT
from rayfield.store.protocol.fb.WaitReply import WaitReplyT
from rayfield.store.protocol.fb.WaitRequest import WaitRequestT
from rayfield.store.protocol.fb.WorkerBlockedRequest import WorkerBlockedRequestT

uoffset: typing.TypeAlias = flatbuffers.number_types.UOffsetTFlags.py_type

class Message(object):
  @classmethod
  def GetRootAs(cls, buf: bytes, offset: int) -> Message: ...
  @classmethod
  def GetRootAsMessage(cls, buf: bytes, offset: int) -> Message: ...
  def Init(self, buf: bytes, pos: int) -> None: ...
  def Seq(self) -> int: ...
  def BodyType(self) -> typing.Literal[Body.NONE, Body.Hello, Body.HelloReply, Body.ErrorReply, Body.OkReply, Body.CreateRequest, Body.CreateReply, Body.PutRequest, Body.SealRequest, Body.AbortRequest, Body.GetRequest, Body.GetReply, Body.ReleaseRequest, Body.ContainsRequest, Body.ContainsReply, Body.DeleteRequest, Body.DeleteReply, Body.ListRequest, Body.ListReply, Body.SubscribeRequest, Body.ObjectNotification, Body.StatsRequest, Body.StatsReply, Body.SubmitTaskRequest, Body.RegisterWorkerRequest, Body.TaskDispatch, Body.TaskDoneRequest, Body.WorkerBlockedRequest, Body.WaitRequest, Body.WaitReply, Body.PinRequest, Body.KillActorRequest, Body.CancelTaskRequest, Body.CancelTaskReply, Body.NodeStateRequest, Body.NodeStateReply, Body.ActorHandlesRequest]: ...
  def Body(self) -> table.Table | None: ...
class MessageT(object):
  seq: int
  bodyType: typing.Literal[Body.NONE, Body.Hello, Body.HelloReply, Body.ErrorReply, Body.OkReply, Body.CreateRequest, Body.CreateReply, Body.PutRequest, Body.SealRequest, Body.AbortRequest, Body.GetRequest, Body.GetReply, Body.ReleaseRequest, Body.ContainsRequest, Body.ContainsReply, Body.DeleteRequest, Body.DeleteReply, Body.ListRequest, Body.ListReply, Body.SubscribeRequest, Body.ObjectNotification, Body.StatsRequest, Body.StatsReply, Body.SubmitTaskRequest, Body.RegisterWorkerRequest, Body.TaskDispatch, Body.TaskDoneRequest, Body.WorkerBlockedRequest, Body.WaitRequest, Body.WaitReply, Body.PinRequest, Body.KillActorRequest, Body.CancelTaskRequest, Body.CancelTaskReply, Body.NodeStateRequest, Body.NodeStateReply, Body.ActorHandlesRequest]
  body: typing.Union[None, HelloT, HelloReplyT, ErrorReplyT, OkReplyT, CreateRequestT, CreateReplyT, PutRequestT, SealRequestT, AbortRequestT, GetRequestT, GetReplyT, ReleaseRequestT, ContainsRequestT, ContainsReplyT, DeleteRequestT, DeleteReplyT, ListRequestT, ListReplyT, SubscribeRequestT, ObjectNotificationT, StatsRequestT, StatsReplyT, SubmitTaskRequestT, RegisterWorkerRequestT, TaskDispatchT, TaskDoneRequestT, WorkerBlockedRequestT, WaitRequestT, WaitReplyT, PinRequestT, KillActorRequestT, CancelTaskRequestT, CancelTaskReplyT, NodeStateRequestT, NodeStateReplyT, ActorHandlesRequestT]
  def __init__(
    self,
    seq: int = ...,
    bodyType: typing.Literal[Body.NONE, Body.Hello, Body.HelloReply, Body.ErrorReply, Body.OkReply, Body.CreateRequest, Body.CreateReply, Body.PutRequest, Body.SealRequest, Body.AbortRequest, Body.GetRequest, Body.GetReply, Body.ReleaseRequest, Body.ContainsRequest, Body.ContainsReply, Body.DeleteRequest, Body.DeleteReply, Body.ListRequest, Body.ListReply, Body.SubscribeRequest, Body.ObjectNotification, Body.StatsRequest, Body.StatsReply, Body.SubmitTaskRequest, Body.RegisterWorkerRequest, Body.TaskDispatch, Body.TaskDoneRequest, Body.WorkerBlockedRequest, Body.WaitRequest, Body.WaitReply, Body.PinRequest, Body.KillActorRequest, Body.CancelTaskRequest, Body.CancelTaskReply, Body.NodeStateRequest, Body.NodeStateReply, Body.ActorHandlesRequest] = ...,
    body: typing.Union[None, HelloT, HelloReplyT, ErrorReplyT, OkReplyT, CreateRequestT, CreateReplyT, PutRequestT, SealRequestT, AbortRequestT, GetRequestT, GetReplyT, ReleaseRequestT, ContainsRequestT, ContainsReplyT, DeleteRequestT, DeleteReplyT, ListRequestT, ListReplyT, SubscribeRequestT, ObjectNotificationT, StatsRequestT, StatsReplyT, SubmitTaskRequestT, RegisterWorkerRequestT, TaskDispatchT, TaskDoneRequestT, WorkerBlockedRequestT, WaitRequestT, WaitReplyT, PinRequestT, KillActorRequestT, CancelTaskRequestT, CancelTaskReplyT, NodeStateRequestT, NodeStateReplyT, ActorHandlesRequestT] = ...,
  ) -> None: ...
  @classmethod
  def InitFromBuf(cls, buf: bytes, pos: int) -> MessageT: ...
  @classmethod
  def InitFromPackedBuf(cls, buf: bytes, pos: int = 0) -> MessageT: ...
  @classmethod
  def InitFromObj(cls, message: Message) -> MessageT: ...
  def _UnPack(self, message: Message) -> None: ...
  def Pack(self, builder: flatbuffers.Builder) -> None: ...
def MessageStart(builder: flatbuffers.Builder) -> None: ...
def Start(builder: flatbuffers.Builder) -> None: ...
def MessageAddSeq(builder: flatbuffers.Builder, seq: int) -> None: ...
def MessageAddBodyType(builder: flatbuffers.Builder, bodyType: typing.Literal[Body.NONE, Body.Hello, Body.HelloReply, Body.ErrorReply, Body.OkReply, Body.CreateRequest, Body.CreateReply, Body.PutRequest, Body.SealRequest, Body.AbortRequest, Body.GetRequest, Body.GetReply, Body.ReleaseRequest, Body.ContainsRequest, Body.ContainsReply, Body.DeleteRequest, Body.DeleteReply, Body.ListRequest, Body.ListReply, Body.SubscribeRequest, Body.ObjectNotification, Body.StatsRequest, Body.StatsReply, Body.SubmitTaskRequest, Body.RegisterWorkerRequest, Body.TaskDispatch, Body.TaskDoneRequest, Body.WorkerBlockedRequest, Body.WaitRequest, Body.WaitReply, Body.PinRequest, Body.KillActorRequest, Body.CancelTaskRequest, Body.CancelTaskReply, Body.NodeStateRequest, Body.NodeStateReply, Body.ActorHandlesRequest]) -> None: ...
def MessageAddBody(builder: flatbuffers.Builder, body: uoffset) -> None: ...
def MessageEnd(builder: flatbuffers.Builder) -> uoffset: ...
def End(builder: flatbuffers.Builder) -> uoffset: ...

