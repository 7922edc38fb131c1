// Gradient hooks on autograd nodes that call tbprobe straight from the engine, built against libtorch.
//
// Python's `grad_fn.register_prehook(fn)` runs Python at registration (a RemovableHandle, an OrderedDict) and,
// on every call, wraps every gradient of the node into a tuple before reaching `fn`. The backward capture hooks
// each module's inputs and outputs every step, so both costs add up (about an eighth of the L0 collector's added
// time on a small model, bench/collector_overhead.py). Here one C++ FunctionPreHook per registration wraps only the
// gradient it is about and calls `fn(i, grad)`; nothing else changes, and tbprobe falls back to Python's hooks
// when this module is not built (session.py).
//
// It also hooks the nodes through which a module sends its inputs their gradients (call_start, hook_consumers) and
// reads a tensor's facts for its dump.json item straight from the TensorImpl (ItemReader), both below.
//
// Plain CPython API (no pybind11 module), so nothing here depends on pybind11's ABI tags.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_dtypes.h>

#include <cstring>
#include <memory>
#include <mutex>
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

// A module's share of its inputs' gradients, without a node of tbprobe's in the graph.
//
// The gradient of a module input x, as the reference reports it, is what the module's own operators send back to
// x: not the total, which also sums what every other consumer of x sends. The engine sums those contributions in
// x's input buffer, in the order they arrive. Any node put between x and the module (a view of x, a hook
// Function) sums the module's contributions first and hands on one tensor: the total is then summed in another
// order, different in the last bit, and so, after a few steps, are the weights, which the collector must never
// change. So nothing is put there. When the call begins, call_start notes x's gradient edge and the sequence number
// of the next autograd node; when it ends, hook_consumers walks back from the outputs' nodes over the nodes the
// call made (numbered from there on) and hooks each that has an edge to x, after its backward: the gradient it
// sends along that edge is the module's contribution, and their sum, once all have run, is the module's share. The
// sum is tbprobe's own tensor; the engine's buffers are not touched.
//
// Autograd numbers nodes per thread, so a node is the call's when it has a number from `first` on and was made on
// the call's thread: a call on a fresh thread (a DataParallel replica) starts at a low number where its inputs'
// history, made on another thread, has higher ones.
struct CallStart {
  uint64_t first;
  uint64_t thread;
  std::vector<torch::autograd::Edge> edges;
  // each input's version counter (shared with the tensor: read again when the call ends) and its version then
  std::vector<std::pair<c10::VariableVersion, uint32_t>> versions;
};

const char *kCallStart = "tbprobe._cgrad.CallStart";

void call_start_free(PyObject *capsule) {
  delete static_cast<CallStart *>(PyCapsule_GetPointer(capsule, kCallStart));
}

PyObject *call_start(PyObject *, PyObject *tensors) {
  PyObject *seq = PySequence_Fast(tensors, "call_start(tensors): a list or tuple of tensors");
  if (seq == nullptr) return nullptr;
  auto *cs = new CallStart{at::sequence_number::peek(), at::RecordFunction::currentThreadId(), {}};
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject **items = PySequence_Fast_ITEMS(seq);
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!THPVariable_Check(items[i])) throw std::invalid_argument("call_start(tensors): a list of tensors");
      const at::Tensor &x = THPVariable_Unpack(items[i]);
      cs->edges.push_back(torch::autograd::impl::gradient_edge(x));
      const c10::VariableVersion &counter = x.unsafeGetTensorImpl()->version_counter();
      cs->versions.emplace_back(counter, counter.enabled() ? counter.current_version() : 0);
    }
  } catch (const std::exception &exc) {
    delete cs;
    Py_DECREF(seq);
    PyErr_SetString(PyExc_TypeError, exc.what());
    return nullptr;
  }
  Py_DECREF(seq);
  PyObject *capsule = PyCapsule_New(cs, kCallStart, call_start_free);
  if (capsule == nullptr) delete cs;
  return capsule;
}

// One input's share: its contributions still to come and their sum so far; fn(index, sum) when the last is in.
struct Share {
  PyObject *fn;
  PyObject *index;
  size_t remaining;
  at::Tensor sum;
  std::mutex lock;

  Share(PyObject *f, PyObject *i, size_t n) : fn(f), index(i), remaining(n) {
    Py_INCREF(fn);
    Py_INCREF(index);
  }

  ~Share() {
    if (!python_alive()) return;
    PyGILState_STATE st = PyGILState_Ensure();
    Py_DECREF(fn);
    Py_DECREF(index);
    PyGILState_Release(st);
  }
};

struct ShareHook : torch::autograd::FunctionPostHook {
  std::shared_ptr<Share> share;
  size_t slot;  // which of the node's outgoing gradients goes to the input

  ShareHook(std::shared_ptr<Share> s, size_t j) : share(std::move(s)), slot(j) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list &outputs,
                                            const torch::autograd::variable_list &) override {
    at::Tensor total;
    {
      std::lock_guard<std::mutex> guard(share->lock);
      if (share->remaining == 0) return outputs;
      if (slot < outputs.size() && outputs[slot].defined()) {
        at::NoGradGuard no_grad;
        share->sum = share->sum.defined() ? at::add(share->sum, outputs[slot]) : outputs[slot];
      }
      if (--share->remaining > 0) return outputs;
      total = std::move(share->sum);
      share->sum = at::Tensor();
    }
    if (!python_alive()) return outputs;
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *grad = total.defined() ? THPVariable_Wrap(std::move(total)) : (Py_INCREF(Py_None), Py_None);
    if (grad != nullptr) {
      auto was = at::impl::PythonTorchFunctionTLS::get_disabled_state();
      at::impl::PythonTorchFunctionTLS::set_disabled_state(at::impl::TorchFunctionDisabledState::ALL_DISABLED);
      PyObject *args[2] = {share->index, grad};
      PyObject *res = PyObject_Vectorcall(share->fn, args, 2, nullptr);
      at::impl::PythonTorchFunctionTLS::set_disabled_state(was);
      Py_DECREF(grad);
      Py_XDECREF(res);
    }
    if (PyErr_Occurred()) PyErr_WriteUnraisable(share->fn);
    PyGILState_Release(st);
    return outputs;  // the gradients go on unchanged
  }
};

// hook_consumers(start, outputs, fn) -> tuple: for input i of call_start, how many of the call's nodes send
// it a gradient (each hooked; fn(i, share) comes after the last). 0: none does (an unused input, or one the call
// returns as it is). -1: none does, and the call changed the input in place: a view, whose in-place change the
// engine sends to its base's history through a CopySlices node, past the view's own (the share is not known).
PyObject *hook_consumers(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyCapsule_IsValid(args[0], kCallStart) || !PyCallable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "hook_consumers(start, outputs, fn): call_start's capsule, tensors, a callable");
    return nullptr;
  }
  auto *cs = static_cast<CallStart *>(PyCapsule_GetPointer(args[0], kCallStart));
  PyObject *seq = PySequence_Fast(args[1], "hook_consumers: outputs, a list or tuple of tensors");
  if (seq == nullptr) return nullptr;
  using torch::autograd::Node;
  const size_t n_in = cs->edges.size();
  std::vector<std::vector<std::pair<Node *, size_t>>> found(n_in);
  try {
    auto made_here = [cs](Node *node) {
      uint64_t nr = node->sequence_nr();
      // (UINT64_MAX: AccumulateGrad, a leaf's)
      return nr >= cs->first && nr != UINT64_MAX && node->thread_id() == cs->thread;
    };
    std::vector<Node *> stack;
    std::unordered_set<Node *> seen;
    Py_ssize_t n_out = PySequence_Fast_GET_SIZE(seq);
    PyObject **outs = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n_out; ++k) {
      if (!THPVariable_Check(outs[k])) continue;
      auto fn = THPVariable_Unpack(outs[k]).grad_fn();
      if (fn && made_here(fn.get()) && seen.insert(fn.get()).second) stack.push_back(fn.get());
    }
    while (!stack.empty()) {
      Node *node = stack.back();
      stack.pop_back();
      const auto &edges = node->next_edges();
      for (size_t j = 0; j < edges.size(); ++j) {
        Node *next = edges[j].function.get();
        if (next == nullptr) continue;
        for (size_t i = 0; i < n_in; ++i) {
          if (cs->edges[i].function.get() == next && cs->edges[i].input_nr == edges[j].input_nr)
            found[i].emplace_back(node, j);
        }
        if (made_here(next) && seen.insert(next).second) stack.push_back(next);
      }
    }
    for (size_t i = 0; i < n_in; ++i) {
      if (found[i].empty()) continue;
      PyObject *index = PyLong_FromSize_t(i);
      if (index == nullptr) throw std::bad_alloc();
      auto share = std::make_shared<Share>(args[2], index, found[i].size());
      Py_DECREF(index);
      for (auto &[node, j] : found[i]) node->add_post_hook(std::make_unique<ShareHook>(share, j));
    }
  } catch (const std::exception &exc) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  Py_DECREF(seq);
  PyObject *counts = PyTuple_New(static_cast<Py_ssize_t>(n_in));
  if (counts == nullptr) return nullptr;
  for (size_t i = 0; i < n_in; ++i) {
    const auto &[counter, was] = cs->versions[i];
    bool changed = found[i].empty() && counter.enabled() && counter.current_version() != was;
    PyTuple_SET_ITEM(counts, static_cast<Py_ssize_t>(i),
                     changed ? PyLong_FromLong(-1) : PyLong_FromSize_t(found[i].size()));
  }
  return counts;
}

PyMethodDef methods[] = {
    {"hook_node", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_node)), METH_FASTCALL,
     "hook_node(tensor, fn, i) -> bool: call fn(i, gradient) when the gradient of `tensor` reaches the autograd "
     "node that made it; False (nothing done) when the tensor has no node."},
    {"call_start", call_start, METH_O,
     "call_start(tensors) -> capsule: the tensors' gradient edges and the next node's number, as a call begins."},
    {"hook_consumers", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(hook_consumers)), METH_FASTCALL,
     "hook_consumers(start, outputs, fn) -> tuple of counts: hook the call's nodes that send its inputs gradients; "
     "fn(i, share) once input i's have all run (-1: none, and the input was changed in place)."},
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
