// Gradient hooks on autograd nodes that call tbprobe straight from the engine, built against libtorch.
//
// Python's `grad_fn.register_prehook(fn)` runs Python at registration (a RemovableHandle, an OrderedDict) and,
// on every call, wraps every gradient of the node into a tuple before reaching `fn`. The backward capture hooks
// each module's inputs and outputs every step, so both costs add up (about an eighth of the L0 collector's added
// time on a small model, bench/collector_overhead.py). Here one C++ FunctionPreHook per registration wraps only the
// gradient it is about and calls `fn(i, grad)`; nothing else changes, and tbprobe falls back to Python's hooks
// when this module is not built (session.py).
//
// It also hooks the nodes through which a module sends its inputs their gradients (call_start, hook_consumers:
// _cgrad_shares.h), the consumers after a call of the outputs the call also uses itself (hook_watched, discover:
// _cgrad_watch.h), and reads a tensor's facts for its dump.json item straight from the TensorImpl (ItemReader:
// _cgrad_reader.h).
//
// Plain CPython API (no pybind11 module), so nothing here depends on pybind11's ABI tags.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_dtypes.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
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

// Depth first, from the nodes that made `tensors` (a fast sequence), back over the nodes `keep` accepts, each once:
// on_start(k, tensor, node) for each starting tensor whose node is kept, on_edge(node, j, next) for edge j of each
// node reached (its end `next` not null). The nodes of `also` (tensors, borrowed) are starting points too, without
// on_start. hook_consumers walks a call's nodes, discover a pass's nodes after the watched calls.
template <class Keep, class OnStart, class OnEdge>
void walk_back(PyObject *tensors, Keep keep, OnStart on_start, OnEdge on_edge,
               const std::vector<PyObject *> &also = {}) {
  using torch::autograd::Node;
  std::vector<Node *> stack;
  std::unordered_set<Node *> seen;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(tensors);
  PyObject **items = PySequence_Fast_ITEMS(tensors);
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (!THPVariable_Check(items[k])) continue;
    const at::Tensor &t = THPVariable_Unpack(items[k]);
    auto fn = t.grad_fn();
    if (!fn || !keep(fn.get())) continue;
    on_start(k, t, fn.get());
    if (seen.insert(fn.get()).second) stack.push_back(fn.get());
  }
  for (PyObject *item : also) {
    auto fn = THPVariable_Unpack(item).grad_fn();
    if (fn && keep(fn.get()) && seen.insert(fn.get()).second) stack.push_back(fn.get());
  }
  while (!stack.empty()) {
    Node *node = stack.back();
    stack.pop_back();
    const auto &edges = node->next_edges();
    for (size_t j = 0; j < edges.size(); ++j) {
      Node *next = edges[j].function.get();
      if (next == nullptr) continue;
      on_edge(node, j, next);
      if (keep(next) && seen.insert(next).second) stack.push_back(next);
    }
  }
}

// The Python function a hook calls and the argument it always passes first (a hook's index; null for none), held
// as long as the hook lives. A node may die on an engine thread without the GIL, or after the interpreter is gone:
// they are released with the GIL taken, or leaked.
struct HookFn {
  PyObject *fn;
  PyObject *first;

  HookFn(PyObject *f, PyObject *a) : fn(f), first(a) {
    Py_INCREF(fn);
    Py_XINCREF(first);
  }
  HookFn(const HookFn &) = delete;
  HookFn &operator=(const HookFn &) = delete;

  ~HookFn() {
    if (!python_alive()) return;
    PyGILState_STATE st = PyGILState_Ensure();
    Py_DECREF(fn);
    Py_XDECREF(first);
    PyGILState_Release(st);
  }

  // fn(a, b), the GIL held, both borrowed; not called when one is null (making it failed). tbprobe's own work is
  // kept out of the operator mode, which is on during a backward pass (backward_pass.py), as
  // torch.overrides.DisableTorchFunction would keep it, without its Python object. fn reports its own errors
  // (HookGuard); what is left (no memory to make an argument) is reported as unraisable: it must never reach the
  // engine, which would abort the user's backward. A Ctrl-C that landed in fn is the user's: the engine would turn
  // it into a RuntimeError, so it is raised again as a fresh interrupt, which Python delivers (to the main
  // thread's SIGINT handler) as soon as Python code runs there: at the latest when backward() returns.
  void call(PyObject *a, PyObject *b) const {
    if (a != nullptr && b != nullptr) {
      auto was = at::impl::PythonTorchFunctionTLS::get_disabled_state();
      at::impl::PythonTorchFunctionTLS::set_disabled_state(at::impl::TorchFunctionDisabledState::ALL_DISABLED);
      PyObject *args[2] = {a, b};
      Py_XDECREF(PyObject_Vectorcall(fn, args, 2, nullptr));
      at::impl::PythonTorchFunctionTLS::set_disabled_state(was);
    }
    if (PyErr_Occurred() == nullptr) return;
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
      PyErr_Clear();
      PyErr_SetInterrupt();
    } else {
      PyErr_WriteUnraisable(fn);
    }
  }

  void call(PyObject *b) const { call(first, b); }
};

// A gradient as Python's hooks give it: a new reference, None for an undefined one (null when out of memory).
PyObject *wrap_grad(at::Tensor g) {
  if (!g.defined()) {
    Py_INCREF(Py_None);
    return Py_None;
  }
  return THPVariable_Wrap(std::move(g));
}

#include "_cgrad_watch.h"

// The hook holds `fn` and `i`; the node holds the hook; nothing of tbprobe holds the node (session.py says why).
struct GradHook : torch::autograd::FunctionPreHook {
  HookFn fn;  // fn(i, grad)
  size_t nr;  // the tensor's output_nr: which of the node's incoming gradients is its gradient
  std::shared_ptr<Watch> watch;  // a watched output's (_cgrad_watch.h): its gradient is the watch's sum

  GradHook(PyObject *f, PyObject *i, size_t n) : fn(f, i), nr(n) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list &grads) override {
    if (!python_alive()) return grads;
    PyGILState_STATE st = PyGILState_Ensure();
    at::Tensor g = nr < grads.size() ? grads[nr] : at::Tensor();
    if (watch) g = watch_take(*watch, g);
    PyObject *grad = wrap_grad(std::move(g));
    fn.call(grad);
    Py_XDECREF(grad);
    PyGILState_Release(st);
    return grads;  // the gradients go on unchanged
  }
};

// The gradients of a node's post hook as Python's register_hook gives them: a tuple, None for an undefined one.
PyObject *wrap_all(const torch::autograd::variable_list &grads) {
  PyObject *tup = PyTuple_New(static_cast<Py_ssize_t>(grads.size()));
  if (tup == nullptr) return nullptr;
  for (size_t k = 0; k < grads.size(); ++k) {
    PyObject *g = wrap_grad(grads[k]);
    if (g == nullptr) {
      Py_DECREF(tup);
      return nullptr;
    }
    PyTuple_SET_ITEM(tup, static_cast<Py_ssize_t>(k), g);
  }
  return tup;
}

// An operator's backward record (NodeTracker.on_node): fn(grad_inputs, grad_outputs) once the node has run, what
// Python's grad_fn.register_hook(fn) calls, without the Python object of the node, the RemovableHandle and the
// OrderedDict that registration makes (about 2 us of each operator call at L1).
struct NodePostHook : torch::autograd::FunctionPostHook {
  HookFn fn;

  explicit NodePostHook(PyObject *f) : fn(f, nullptr) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list &outputs,
                                            const torch::autograd::variable_list &inputs) override {
    if (!python_alive()) return outputs;
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *grad_inputs = wrap_all(outputs);
    PyObject *grad_outputs = grad_inputs != nullptr ? wrap_all(inputs) : nullptr;
    fn.call(grad_inputs, grad_outputs);
    Py_XDECREF(grad_inputs);
    Py_XDECREF(grad_outputs);
    PyGILState_Release(st);
    return outputs;
  }
};

// hook_nodes(tensors, fn) -> int: one NodePostHook(fn) on each distinct node that made one of `tensors` (a list;
// those without a node are passed over); how many nodes were hooked.
PyObject *hook_nodes(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyList_Check(args[0]) || !PyCallable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "hook_nodes(tensors, fn): a list of tensors and a callable");
    return nullptr;
  }
  std::vector<torch::autograd::Node *> done;
  try {
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(args[0]); ++k) {
      PyObject *item = PyList_GET_ITEM(args[0], k);
      if (!THPVariable_Check(item)) continue;
      auto node = THPVariable_Unpack(item).grad_fn();
      if (!node || std::find(done.begin(), done.end(), node.get()) != done.end()) continue;
      node->add_post_hook(std::make_unique<NodePostHook>(args[1]));
      done.push_back(node.get());
    }
  } catch (const std::exception &exc) {
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  return PyLong_FromSize_t(done.size());
}

// hook_node(t, fn, i), and with `watched` the watched form (hook_watched)
PyObject *hook_grad(PyObject *const *args, Py_ssize_t nargs, bool watched) {
  if (nargs != 3 || !THPVariable_Check(args[0]) || !PyCallable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, watched ? "hook_watched(tensor, fn, i): a tensor, a callable and an index"
                                             : "hook_node(tensor, fn, i): a tensor, a callable and an index");
    return nullptr;
  }
  const at::Tensor &t = THPVariable_Unpack(args[0]);
  auto node = t.grad_fn();  // (a shared or intrusive pointer, by torch version)
  if (!node) Py_RETURN_FALSE;
  try {
    auto hook = std::make_unique<GradHook>(args[1], args[2], static_cast<size_t>(t.output_nr()));
    if (watched) {
      hook->watch = std::make_shared<Watch>(node, static_cast<uint32_t>(t.output_nr()), at::sequence_number::peek(),
                                            at::RecordFunction::currentThreadId());
      watches.push_back(hook->watch);
    }
    // first among the node's hooks: of calls ending on one node (a module and the modules around it returning its
    // output; identity modules one after the other, each returning what came), the last to end is the first whose
    // backward runs, as the reference's identity nodes after their outputs run
    auto &hooks = node->pre_hooks();
    hooks.insert(hooks.begin(), std::move(hook));
  } catch (const std::exception &exc) {
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  Py_RETURN_TRUE;
}

PyObject *hook_node(PyObject *, PyObject *const *args, Py_ssize_t nargs) { return hook_grad(args, nargs, false); }

PyObject *hook_watched(PyObject *, PyObject *const *args, Py_ssize_t nargs) { return hook_grad(args, nargs, true); }

#include "_cgrad_reader.h"
#include "_cgrad_shares.h"

PyMethodDef methods[] = {
    {"hook_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_node)), METH_FASTCALL,
     "hook_node(tensor, fn, i) -> bool: call fn(i, gradient) when the gradient of `tensor` reaches the autograd "
     "node that made it; False (nothing done) when the tensor has no node."},
    {"hook_nodes", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_nodes)), METH_FASTCALL,
     "hook_nodes(tensors, fn) -> int: call fn(grad_inputs, grad_outputs), as grad_fn.register_hook's hook, after "
     "each distinct node that made one of the tensors has run; how many nodes were hooked."},
    {"hook_watched", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_watched)), METH_FASTCALL,
     "hook_watched(tensor, fn, i) -> bool: hook_node for a module output the module also uses itself: fn(i, what "
     "the consumers after the call send) once a backward pass has found them (discover); _cgrad_watch.h."},
    {"discover", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(discover)), METH_FASTCALL,
     "discover(roots[, grads[, token]]) -> int: before a backward pass from `roots` (with those gradients), hook "
     "the consumers of the watched outputs."},
    {"drop_seeds", drop_seeds, METH_O,
     "drop_seeds(token) -> None: after its pass, forget the root gradients discover(..., token) gave watches whose "
     "node did not run."},
    {"clear_watches", clear_watches, METH_NOARGS, "clear_watches() -> None: forget the step's watched outputs."},
    {"watching", watching, METH_NOARGS, "watching() -> bool: whether an output is watched."},
    {"same_edge", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(same_edge)), METH_FASTCALL,
     "same_edge(start, i, t) -> bool: whether t still has input i's gradient edge of call_start."},
    {"call_start", call_start, METH_O,
     "call_start(tensors) -> capsule: the tensors' gradient edges and the next node's number, as a call begins."},
    {"hook_consumers", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_consumers)), METH_FASTCALL,
     "hook_consumers(start, outputs, fn[, owner]) -> (counts, used): hook the call's nodes that send its inputs "
     "gradients (reached from the outputs, or from the tensor attributes of the owner and the modules inside it); "
     "fn(i, share) once input i's have "
     "all run (-1: none, and the input was changed in place); `used`: the positions of the outputs the call's own "
     "nodes consume too."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cgrad",
                      "C++ gradient hooks on autograd nodes, modules' shares of their inputs' gradients and the item reader.", -1,
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
