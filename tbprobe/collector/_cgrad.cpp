// Gradient hooks on autograd nodes that call tbprobe straight from the engine, built against libtorch.
//
// Python's `grad_fn.register_prehook(fn)` runs Python at registration (a RemovableHandle, an OrderedDict) and,
// on every call, wraps every gradient of the node into a tuple before reaching `fn`. The backward capture hooks
// each module's inputs and outputs every step, so both costs add up (about an eighth of the L0 collector's added
// time on a small model, bench/collector_overhead.py). Here one C++ FunctionPreHook per registration wraps only the
// gradient it is about and calls `fn(i, grad)`; nothing else changes, and tbprobe falls back to Python's hooks
// when this module is not built (session.py).
//
// It also reads a tensor's facts for its dump.json item straight from the TensorImpl (item_reader below).
//
// Plain CPython API (no pybind11 module), so nothing here depends on pybind11's ABI tags.
#include <Python.h>

#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_dtypes.h>

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
      PyObject *args[2] = {index, grad};
      PyObject *res = PyObject_Vectorcall(fn, args, 2, nullptr);
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
// as seven Python attributes, about 1.3 us of its 3 us per item. Bound to one HostItems by item_reader.
tbprobe_item_from_facts item_from_facts = nullptr;

PyObject *read_item(PyObject *host_items, PyObject *t) {
  if (!THPVariable_Check(t)) Py_RETURN_NONE;
  try {
    const at::Tensor &x = THPVariable_Unpack(t);
    if (!x.defined() || x.layout() != at::kStrided || !x.is_cpu() || x.is_neg() || x.is_conj() ||
        !x.has_storage() || !x.is_contiguous())
      Py_RETURN_NONE;
    const void *data = x.const_data_ptr();
    auto sizes = x.sizes();
    PyObject *dtype = reinterpret_cast<PyObject *>(torch::getTHPDtype(x.scalar_type()));  // (borrowed)
    return item_from_facts(host_items, t, dtype, sizes.data(), static_cast<int>(sizes.size()), data,
                           x.requires_grad() ? 1 : 0);
  } catch (const std::exception &) {
    Py_RETURN_NONE;  // whatever the TensorImpl refuses (a wrapper without storage): the Python path meets it
  }
}

// A module's input as the module gets it (module_hooks._alias_inputs): `x.view_as(x)` costs a Python method call
// and a ViewBackward0 node that reshapes the gradient; at::alias makes an AliasBackward0, which passes it on as
// it is. Values and gradients are the same bit for bit. For exact torch.Tensor and Parameter only (a subclass
// keeps view_as and its __torch_function__).
PyObject *alias(PyObject *, PyObject *t) {
  if (!THPVariable_Check(t)) {
    PyErr_SetString(PyExc_TypeError, "alias(tensor): a tensor");
    return nullptr;
  }
  try {
    return THPVariable_Wrap(at::alias(THPVariable_Unpack(t)));
  } catch (const std::exception &exc) {
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
}

PyMethodDef read_item_def = {"item", read_item, METH_O,
                             "item(t) -> HostItems.item(t), with the tensor's facts read in C++."};

PyObject *item_reader(PyObject *, PyObject *host_items) {
  if (item_from_facts == nullptr) {
    auto *api = static_cast<tbprobe_item_from_facts *>(PyCapsule_Import(TBPROBE_ITEM_API, 0));
    if (api == nullptr) return nullptr;
    item_from_facts = *api;
  }
  return PyCFunction_New(&read_item_def, host_items);
}

PyMethodDef methods[] = {
    {"hook_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_node)), METH_FASTCALL,
     "hook_node(tensor, fn, i) -> bool: call fn(i, gradient) when the gradient of `tensor` reaches the autograd "
     "node that made it; False (nothing done) when the tensor has no node."},
    {"alias", alias, METH_O, "alias(t) -> torch.ops.aten.alias(t), called from C++."},
    {"item_reader", item_reader, METH_O,
     "item_reader(host_items) -> item(t): what host_items.item(t) returns, the tensor's facts read in C++ (for "
     "_cstats.HostItems only)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cgrad", "C++ gradient hooks on autograd nodes.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__cgrad() { return PyModule_Create(&module); }
