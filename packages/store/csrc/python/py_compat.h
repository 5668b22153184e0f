// What the bindings need from CPython beyond the stable ABI, for both builds of
// rayfield.store._native: the full-API one (Python 3.10) and the limited-API one
// (Py_LIMITED_API=0x030B0000, one abi3 module for Python 3.11 and later; the buffer
// protocol entered the limited API in 3.11). build.py picks the build.
//
// Under the limited API the object structs are opaque: the accessor macros the
// bindings use are defined here as the equivalent functions (same borrowed/stolen
// references), and type names and tp_alloc/tp_free go through the helpers below. The
// full-API build keeps CPython's own macros.
#pragma once

#include <string>

#ifdef Py_LIMITED_API
#if Py_LIMITED_API + 0 < 0x030B0000
#error "rayfield.store._native needs Py_LIMITED_API >= 3.11 (the buffer protocol)"
#endif
// Borrowed references, as the macros return.
#define PyTuple_GET_ITEM(op, i) PyTuple_GetItem(op, i)
#define PyTuple_GET_SIZE(op) PyTuple_Size(op)
#define PyList_GET_SIZE(op) PyList_Size(op)
// Steals `v`; the bindings only fill new lists, so there is no old item to drop.
#define PyList_SET_ITEM(op, i, v) ((void)PyList_SetItem(op, i, v))
#define PyStructSequence_SET_ITEM(op, i, v) PyStructSequence_SetItem(op, i, v)
#define PyBytes_AS_STRING(op) PyBytes_AsString(op)
#define PyBytes_GET_SIZE(op) PyBytes_Size(op)
#define PyUnicode_AsUTF8(op) PyUnicode_AsUTF8AndSize(op, nullptr)
// PySequence_Fast() returns a list or a tuple; these read it as the macros do
// (abstract.h defines them even under the limited API, over the opaque structs).
#undef PySequence_Fast_GET_SIZE
#undef PySequence_Fast_GET_ITEM
#define PySequence_Fast_GET_SIZE(op) PySequence_Size(op)
#define PySequence_Fast_GET_ITEM(op, i) \
  (PyList_Check(op) ? PyList_GetItem(op, i) : PyTuple_GetItem(op, i))
#endif

namespace {

// The type's tp_name, as error messages print it ("int", "numpy.ndarray", "Foo").
inline std::string TypeName(PyObject* o) {
#ifndef Py_LIMITED_API
  return Py_TYPE(o)->tp_name;
#else
  // A heap type's tp_name is its __name__; a static type's is "module.name" unless
  // its module is builtins.
  PyTypeObject* type = Py_TYPE(o);
  std::string name = "?";
  PyObject* n = PyType_GetName(type);
  if (n != nullptr) {
    const char* s = PyUnicode_AsUTF8AndSize(n, nullptr);
    if (s != nullptr) name = s;
    Py_DECREF(n);
  }
  if (!(PyType_GetFlags(type) & Py_TPFLAGS_HEAPTYPE)) {
    PyObject* mod = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__module__");
    const char* m = mod != nullptr ? PyUnicode_AsUTF8AndSize(mod, nullptr) : nullptr;
    if (m != nullptr && std::string(m) != "builtins") name = std::string(m) + "." + name;
    Py_XDECREF(mod);
  }
  PyErr_Clear();
  return name;
#endif
}

// tp_alloc of `type` (heap types: the bindings' own and their Python subclasses).
inline PyObject* AllocInstance(PyTypeObject* type) {
  auto alloc = reinterpret_cast<allocfunc>(PyType_GetSlot(type, Py_tp_alloc));
  return alloc(type, 0);
}

// The end of a tp_dealloc: tp_free of the object's type, then drop the reference
// every instance of a heap type holds on its type.
inline void FreeInstance(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  auto free_fn = reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free));
  free_fn(self);
  Py_DECREF(type);
}

// A heap type from `spec`, added to the module as `name`; `*out` keeps a reference.
inline int AddType(PyObject* m, const char* name, PyType_Spec* spec, PyTypeObject** out) {
  PyObject* type = PyType_FromSpec(spec);
  if (type == nullptr) return -1;
  if (PyModule_AddObjectRef(m, name, type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  *out = reinterpret_cast<PyTypeObject*>(type);
  return 0;
}

}  // namespace
