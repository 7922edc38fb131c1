// Gradient hooks on autograd nodes that call tbprobe straight from the engine, built against libtorch.
//
// Python's `grad_fn.register_prehook(fn)` runs Python at registration (a RemovableHandle, an OrderedDict) and,
// on every call, wraps every gradient of the node into a tuple before reaching `fn`. The backward capture hooks
// each module's inputs and outputs every step, so both costs add up (about an eighth of the L0 collector's added
// time on a small model, bench/collector_overhead.py). Here one C++ FunctionPreHook per registration wraps only the
// gradient it is about and calls `fn(i, grad)`; nothing else changes, and tbprobe falls back to Python's hooks
// when this module is not built (session.py).
//
// It also makes module inputs' aliases (alias) and reads a tensor's facts for its dump.json item straight from the
// TensorImpl (ItemReader), both below.
//
// Plain CPython API (no pybind11 module), so nothing here depends on pybind11's ABI tags.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_dtypes.h>

#include <cstring>
#include <unordered_map>
#include <vector>

#include "_cstats_api.h"

namespace {

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// The hook holds `fn` and `i`; the node holds the hook; nothing of tbprobe holds the node (session.py says why).
struct GradHook : torch::autograd::FunctionPreHook {
  PyObject *fn;
  PyObject *index;
  size_t nr;  // the tensor's output_nr: which of the node's incoming gradients is its gradient

  GradHook(PyObject *f, PyObject *i, size_t n) : fn(f), index(i), nr(n) {
    Py_INCREF(fn);
    Py_INCREF(index);
  }

  ~GradHook() override {
    // A node may die on an engine thread without the GIL, or after the interpreter is gone (then leak).
    if (!python_alive()) return;
    PyGILState_STATE st = PyGILState_Ensure();
    Py_DECREF(fn);
    Py_DECREF(index);
    PyGILState_Release(st);
  }

  torch::autograd::variable_list operator()(const torch::autograd::variable_list &grads) override {
    if (!python_alive()) return grads;
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *grad = Py_None;
    if (nr < grads.size() && grads[nr].defined())
      grad = THPVariable_Wrap(grads[nr]);
    else
      Py_INCREF(grad);
    if (grad != nullptr) {
      // tbprobe's own work: kept out of the operator mode, which is on during a backward pass (backward_pass.py),
      // as torch.overrides.DisableTorchFunction would, without its Python object
      auto was = at::impl::PythonTorchFunctionTLS::get_disabled_state();
      at::impl::PythonTorchFunctionTLS::set_disabled_state(at::impl::TorchFunctionDisabledState::ALL_DISABLED);
      PyObject *args[2] = {index, grad};
      PyObject *res = PyObject_Vectorcall(fn, args, 2, nullptr);
      at::impl::PythonTorchFunctionTLS::set_disabled_state(was);
      Py_DECREF(grad);
      Py_XDECREF(res);
    }
    // `fn` reports its own errors (HookGuard); what is left (no memory to wrap the tensor) must not reach the
    // engine, which would abort the user's backward
    if (PyErr_Occurred()) PyErr_WriteUnraisable(fn);
    PyGILState_Release(st);
    return grads;  // the gradients go on unchanged
  }
};

PyObject *hook_node(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3 || !THPVariable_Check(args[0]) || !PyCallable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "hook_node(tensor, fn, i): a tensor, a callable and an index");
    return nullptr;
  }
  const at::Tensor &t = THPVariable_Unpack(args[0]);
  auto node = t.grad_fn();  // (a shared or intrusive pointer, by torch version)
  if (!node) Py_RETURN_FALSE;
  try {
    node->add_pre_hook(std::make_unique<GradHook>(args[1], args[2], static_cast<size_t>(t.output_nr())));
  } catch (const std::exception &exc) {
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  Py_RETURN_TRUE;
}

// The item of a plain small CPU tensor (_cstats_items.h says which), with its facts (type, layout, device,
// contiguity, dtype, sizes, data address, requires_grad) read from the TensorImpl: the C path of _cstats reads them
// as seven Python attributes, about 1.3 us of its 3 us per item.
//
// An ItemReader also remembers, for one step, the item of each tensor it summarised: the same tensor met again
// unmodified (a module's output is its last inner module's output; a gradient passes through a module boundary
// as it is) gets a copy of that item instead of a second pass over its memory. At L0 on the small GPT that is 39
// of 158 items a step, at mix 192 of 415. "The same" is the same TensorImpl, alive (a weak reference, so its
// address is not reused), with the same version counter, data address, dtype, sizes and requires_grad (the last
// three can change without a version bump: `t.data = u`, `requires_grad_()`). What changes a tensor without a
// version bump (a collective writing through C++) is forgotten by the caller (StatBuffer.forget); so is
// everything at the end of the step (clear).
tbprobe_item_api item_api = {nullptr, nullptr};

struct Seen {
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;
  uint32_t version;
  const void *data;
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
  bool requires_grad;
  PyTypeObject *type;  // of the Python tensor the item was made for (Tensor or Parameter)
  PyObject *item;      // (held)
  double health;
};

struct ItemReader {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject *host_items;
  std::unordered_map<c10::TensorImpl *, Seen> *seen;
};

void reader_drop(ItemReader *self, std::unordered_map<c10::TensorImpl *, Seen>::iterator it) {
  Py_DECREF(it->second.item);
  self->seen->erase(it);
}

void reader_clear_seen(ItemReader *self) {
  if (self->seen == nullptr) return;
  for (auto &kv : *self->seen) Py_DECREF(kv.second.item);
  self->seen->clear();
}

PyObject *reader_item(ItemReader *self, PyObject *t) {
  // exact Tensor or Parameter only, by type: THPVariable_Check would ask isinstance(), which runs user code
  // (a __class__ property) and may throw
  if (!THPVariable_CheckExact(t)) Py_RETURN_NONE;
  try {
    const at::Tensor &x = THPVariable_Unpack(t);
    if (!x.defined() || x.layout() != at::kStrided || !x.is_cpu() || x.is_neg() || x.is_conj() ||
        !x.has_storage() || !x.is_contiguous())
      Py_RETURN_NONE;
    const void *data = x.const_data_ptr();
    auto sizes = x.sizes();
    c10::TensorImpl *impl = x.unsafeGetTensorImpl();
    bool versioned = !x.is_inference();  // (an inference tensor has no version counter)
    uint32_t version = versioned ? x._version() : 0;
    if (versioned) {
      auto it = self->seen->find(impl);
      if (it != self->seen->end()) {
        Seen &e = it->second;
        auto alive = e.impl.lock();
        if (alive.get() == impl && e.version == version && e.data == data && e.dtype == x.scalar_type() &&
            e.requires_grad == x.requires_grad() && e.type == Py_TYPE(t) &&
            sizes.equals(c10::IntArrayRef(e.sizes))) {
          PyObject *copy = PyDict_Copy(e.item);
          if (copy != nullptr) item_api.note(self->host_items, e.health);
          return copy;
        }
        reader_drop(self, it);
      }
    }
    PyObject *dtype = reinterpret_cast<PyObject *>(torch::getTHPDtype(x.scalar_type()));  // (borrowed)
    double health = 0.0;
    PyObject *item = item_api.item_from_facts(self->host_items, t, dtype, sizes.data(),
                                              static_cast<int>(sizes.size()), data, x.requires_grad() ? 1 : 0,
                                              &health);
    if (item != nullptr && item != Py_None && versioned) {
      Py_INCREF(item);
      self->seen->emplace(impl, Seen{c10::weak_intrusive_ptr<c10::TensorImpl>(x.getIntrusivePtr()), version,
                                     data, sizes.vec(), x.scalar_type(), x.requires_grad(), Py_TYPE(t), item,
                                     health});
    }
    return item;
  } catch (const std::exception &) {
    Py_RETURN_NONE;  // whatever the TensorImpl refuses (a wrapper without storage): the Python path meets it
  }
}

PyObject *reader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != nullptr) {
    PyErr_SetString(PyExc_TypeError, "ItemReader(t): one tensor");
    return nullptr;
  }
  return reader_item(reinterpret_cast<ItemReader *>(self), args[0]);
}

PyObject *reader_clear(PyObject *self, PyObject *) {
  reader_clear_seen(reinterpret_cast<ItemReader *>(self));
  Py_RETURN_NONE;
}

PyObject *reader_forget(PyObject *self, PyObject *t) {
  auto *r = reinterpret_cast<ItemReader *>(self);
  if (THPVariable_CheckExact(t)) {   // (nothing else is remembered)
    auto it = r->seen->find(THPVariable_Unpack(t).unsafeGetTensorImpl());
    if (it != r->seen->end()) reader_drop(r, it);
  }
  Py_RETURN_NONE;
}

PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  PyObject *host_items;
  if (!PyArg_ParseTuple(args, "O", &host_items)) return nullptr;
  if (item_api.item_from_facts == nullptr) {
    auto *api = static_cast<tbprobe_item_api *>(PyCapsule_Import(TBPROBE_ITEM_API, 0));
    if (api == nullptr) return nullptr;
    item_api = *api;
  }
  if (strcmp(Py_TYPE(host_items)->tp_name, "tbprobe.collector._cstats.HostItems") != 0) {
    PyErr_SetString(PyExc_TypeError, "ItemReader(host_items): a tbprobe.collector._cstats.HostItems");
    return nullptr;
  }
  auto *self = reinterpret_cast<ItemReader *>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->vectorcall = reader_vectorcall;
  Py_INCREF(host_items);
  self->host_items = host_items;
  self->seen = new std::unordered_map<c10::TensorImpl *, Seen>();
  return reinterpret_cast<PyObject *>(self);
}

void reader_dealloc(PyObject *obj) {
  auto *self = reinterpret_cast<ItemReader *>(obj);
  reader_clear_seen(self);
  delete self->seen;
  Py_XDECREF(self->host_items);
  Py_TYPE(obj)->tp_free(obj);
}

PyMethodDef reader_methods[] = {
    {"clear", reader_clear, METH_NOARGS, "clear() -> None: forgets every tensor met (the step is over)."},
    {"forget", reader_forget, METH_O, "forget(t) -> None: `t` changed without a version bump: summarise it anew."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject ItemReaderType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// A module's input as the module gets it (module_hooks._alias_inputs): `x.view_as(x)` costs a Python method call
// and a ViewBackward0 node that reshapes the gradient; at::alias makes an AliasBackward0, which passes it on as
// it is. Values and gradients are the same bit for bit. For exact torch.Tensor and Parameter only (a subclass
// keeps view_as and its __torch_function__).
PyObject *alias(PyObject *, PyObject *t) {
  if (!THPVariable_CheckExact(t)) {
    PyErr_SetString(PyExc_TypeError, "alias(tensor): a torch.Tensor or Parameter");
    return nullptr;
  }
  try {
    return THPVariable_Wrap(at::alias(THPVariable_Unpack(t)));
  } catch (const std::exception &exc) {
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"hook_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_node)), METH_FASTCALL,
     "hook_node(tensor, fn, i) -> bool: call fn(i, gradient) when the gradient of `tensor` reaches the autograd "
     "node that made it; False (nothing done) when the tensor has no node."},
    {"alias", alias, METH_O, "alias(t) -> torch.ops.aten.alias(t), called from C++."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cgrad",
                      "C++ gradient hooks on autograd nodes, module inputs' aliases and the item reader.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__cgrad() {
  ItemReaderType.tp_name = "tbprobe.collector._cgrad.ItemReader";
  ItemReaderType.tp_basicsize = sizeof(ItemReader);
  ItemReaderType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  ItemReaderType.tp_doc =
      "ItemReader(host_items): reader(t) -> host_items.item(t), with the tensor's facts read in C++ and the item "
      "of a tensor met again unmodified copied (clear() at each step's end).";
  ItemReaderType.tp_new = reader_new;
  ItemReaderType.tp_dealloc = reader_dealloc;
  ItemReaderType.tp_call = PyVectorcall_Call;
  ItemReaderType.tp_vectorcall_offset = offsetof(ItemReader, vectorcall);
  ItemReaderType.tp_methods = reader_methods;
  if (PyType_Ready(&ItemReaderType) < 0) return nullptr;
  PyObject *m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  Py_INCREF(&ItemReaderType);
  if (PyModule_AddObject(m, "ItemReader", reinterpret_cast<PyObject *>(&ItemReaderType)) < 0) {
    Py_DECREF(&ItemReaderType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
