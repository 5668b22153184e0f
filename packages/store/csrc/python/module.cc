// rayfield.store._native: the only translation unit that includes Python.h.
//
// Thin CPython bindings over the native core: ObjectBuffer (zero-copy,
// read-only views of sealed objects), Client, NodeServer and SchedulerState
// (py_scheduler.inc), TaskManagerState (py_tasks.inc), typed node events
// (py_events.inc), AllocatorState and ObjectTableState (py_state.inc). Blocking calls release the GIL. Errors are raised as
// the typed exceptions of rayfield.store.errors.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "py_compat.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "client.h"
#include "common.h"
#include "node_server.h"
#include "protocol.h"
#include "scheduler.h"
#include "task_manager.h"

using namespace rayfield;

namespace {

// ---- errors -----------------------------------------------------------------------

PyObject* g_from_code = nullptr;  // rayfield.store.errors._from_code

PyObject* RaiseCode(int code, const std::string& message, uint64_t a = 0, uint64_t b = 0,
                    uint64_t c = 0) {
  PyObject* exc = PyObject_CallFunction(g_from_code, "is#KKK", code, message.data(),
                                        static_cast<Py_ssize_t>(message.size()),
                                        static_cast<unsigned long long>(a),
                                        static_cast<unsigned long long>(b),
                                        static_cast<unsigned long long>(c));
  if (exc != nullptr) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
    Py_DECREF(exc);
  }
  return nullptr;
}

PyObject* RaiseStatus(const Status& s) {
  if (s.code == Code::Internal && s.message.rfind("connection: ", 0) == 0) {
    return RaiseCode(-1, "node connection: " + s.message.substr(12));
  }
  return RaiseCode(static_cast<int>(s.code), s.message, s.requested_bytes, s.capacity_bytes,
                   s.used_bytes);
}

bool ParseId(PyObject* o, UniqueID* out, const char* what = "object_id") {
  char* data;
  Py_ssize_t len;
  if (!PyBytes_Check(o) || PyBytes_AsStringAndSize(o, &data, &len) != 0 ||
      len != static_cast<Py_ssize_t>(kIdSize)) {
    PyErr_Clear();
    RaiseCode(static_cast<int>(Code::InvalidRequest),
              std::string(what) + " must be " + std::to_string(kIdSize) + " bytes, got " +
                  (PyBytes_Check(o) ? std::to_string(PyBytes_GET_SIZE(o)) + " bytes"
                                    : TypeName(o)));
    return false;
  }
  *out = UniqueID::FromBytes(data);
  return true;
}

bool ParseOptionalId(PyObject* o, UniqueID* out, const char* what) {
  if (o == nullptr || o == Py_None) {
    *out = UniqueID{};
    return true;
  }
  return ParseId(o, out, what);
}

bool ParseIds(PyObject* seq, std::vector<UniqueID>* out) {
  PyObject* fast = PySequence_Fast(seq, "object_ids must be a sequence of 20-byte ids");
  if (fast == nullptr) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  out->resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!ParseId(PySequence_Fast_GET_ITEM(fast, i), &(*out)[i])) {
      Py_DECREF(fast);
      return false;
    }
  }
  Py_DECREF(fast);
  return true;
}

PyObject* IdBytes(const UniqueID& id) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(id.bytes.data()), kIdSize);
}

PyObject* OptionalIdBytes(const UniqueID& id) {
  if (id.IsNil()) Py_RETURN_NONE;
  return IdBytes(id);
}

int64_t TimeoutMs(PyObject* timeout) {
  if (timeout == nullptr || timeout == Py_None) return -1;
  double t = PyFloat_AsDouble(timeout);
  if (t == -1.0 && PyErr_Occurred()) return -2;
  if (t < 0) t = 0;
  return static_cast<int64_t>(std::llround(t * 1000.0));
}

}  // namespace

#include "py_events.inc"
#include "py_scheduler.inc"
#include "py_client.inc"
#include "py_node.inc"
#include "py_tasks.inc"
#include "py_state.inc"

// ---- module -------------------------------------------------------------------------

namespace {

PyObject* g_log_callback = nullptr;

PyObject* SetLogCallback(PyObject*, PyObject* cb) {
  Py_XDECREF(g_log_callback);
  g_log_callback = nullptr;
  if (cb == Py_None) {
    SetLogSink(nullptr);
    Py_RETURN_NONE;
  }
  Py_INCREF(cb);
  g_log_callback = cb;
  SetLogSink([](int level, const std::string& msg) {
    PyGILState_STATE st = PyGILState_Ensure();
    if (g_log_callback != nullptr) {
      PyObject* r = PyObject_CallFunction(g_log_callback, "is#", level, msg.data(),
                                          static_cast<Py_ssize_t>(msg.size()));
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
    }
    PyGILState_Release(st);
  });
  Py_RETURN_NONE;
}

PyObject* VerifyFramePy(PyObject*, PyObject* arg) {
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return nullptr;
  std::string error;
  const fb::Frame* f = VerifyFrame(static_cast<const uint8_t*>(view.buf), view.len, &error);
  PyBuffer_Release(&view);
  return PyBool_FromLong(f != nullptr);
}

PyMethodDef kModuleMethods[] = {
    {"set_log_callback", SetLogCallback, METH_O,
     "Route native log lines to callback(level, message); None restores stderr."},
    {"verify_frame", VerifyFramePy, METH_O,
     "True when the bytes are a well-formed Frame flatbuffer (without length prefix)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "rayfield.store._native",
                       "Native core of a rayfield node.", -1, kModuleMethods};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  PyObject* errors = PyImport_ImportModule("rayfield.store.errors");
  if (errors == nullptr) return nullptr;
  g_from_code = PyObject_GetAttrString(errors, "_from_code");
  Py_DECREF(errors);
  if (g_from_code == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  if (PyModule_AddIntConstant(m, "PROTOCOL_VERSION", kProtocolVersion) != 0 ||
      PyModule_AddIntConstant(m, "ID_SIZE", kIdSize) != 0 ||
      PyModule_AddIntConstant(m, "RESOURCE_UNIT", kResourceUnit) != 0 ||
      PyModule_AddIntConstant(m, "NOTIFIES_EVICTIONS", 1) != 0 ||
      AddClientTypes(m) != 0 || AddNodeServerType(m) != 0 || AddSchedulerStateType(m) != 0 ||
      AddTaskManagerStateType(m) != 0 || AddEventTypes(m) != 0 || AddStateTypes(m) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
