// _cgrad's module input shares: call_start and hook_consumers (included by _cgrad.cpp, inside its anonymous namespace).
#pragma once

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

// same_edge(start, i, t) -> bool: whether `t` still has the gradient edge input i of call_start had (a call inside
// that returned the input as it is, not changed in place, which gives it a node of its own)
PyObject *same_edge(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyCapsule_IsValid(args[0], kCallStart) || !PyLong_Check(args[1]) || !THPVariable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "same_edge(start, i, tensor): call_start's capsule, an index, a tensor");
    return nullptr;
  }
  auto *cs = static_cast<CallStart *>(PyCapsule_GetPointer(args[0], kCallStart));
  Py_ssize_t i = PyLong_AsSsize_t(args[1]);
  if (i < 0 || static_cast<size_t>(i) >= cs->edges.size()) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "same_edge: no such input");
    return nullptr;
  }
  auto edge = torch::autograd::impl::gradient_edge(THPVariable_Unpack(args[2]));
  return PyBool_FromLong(edge.function.get() == cs->edges[i].function.get() && edge.input_nr == cs->edges[i].input_nr);
}

// One input's share: its contributions still to come and their sum so far; fn(index, sum) when the last is in.
// A later backward pass through the same nodes (retain_graph) gathers it again (backward_records.py says why).
// Some of the nodes may not run in a pass (a second output computed inside that the loss does not use: an
// auxiliary head's): the pass's first contribution counts those of the nodes the engine will run in it (its
// graph task's nodes, as torch._C._will_engine_execute_node asks), so the share is complete when the last of them
// is in, as the reference's full backward hook fires, and not only when the pass ends. The end of the pass (the
// engine's final callback, queued by that first contribution) still hands on the sum of those that came where
// that count was too high.
struct Share {
  HookFn fn;
  std::vector<c10::weak_intrusive_ptr<torch::autograd::Node>> nodes;   // the call's nodes that send the input a gradient
  WeakNode input;   // the node the input's gradient goes to (its history's, or a leaf's AccumulateGrad)
  size_t remaining = 0;   // (0: none of this pass yet, or the share handed on)
  int task = -1;     // the backward pass (graph task) the last contribution came in
  at::Tensor sum;
  std::mutex lock;

  Share(PyObject *f, PyObject *i, const NodePtr &in) : fn(f, i), input(in) {}

  // how many of the nodes the current backward pass runs, `caller` (the pass's first to contribute) among them:
  // it runs, though it is not in the graph task's nodes where it is the pass's root (`y.backward(g)` with y made
  // here: the engine starts at y's node itself, which no edge reaches)
  size_t running_now(const torch::autograd::Node *caller) const {
    const auto *in_graph = torch::autograd::get_current_graph_task_nodes_in_graph();
    const auto *exec = torch::autograd::get_current_graph_task_exec_info();
    if (in_graph == nullptr || in_graph->empty()) return nodes.size();
    size_t n = 0;
    for (const auto &weak : nodes) {
      auto node = weak.lock();
      if (!node.defined()) continue;
      if (node.get() == caller) {
        ++n;
        continue;
      }
      if (in_graph->count(node.get()) == 0) continue;
      if (exec != nullptr && !exec->empty()) {   // (autograd.grad, backward(inputs=...): only what they need)
        auto it = exec->find(node.get());
        if (it == exec->end() || !it->second.should_execute()) continue;
      }
      ++n;
    }
    return std::max<size_t>(n, 1);
  }

  // whether the current pass computes no gradient for the input at all: autograd.grad, or backward(inputs=...),
  // whose inputs the input's history does not lead to. (The reference's full backward hook then never fires: the
  // node it puts after the inputs does not run.)
  bool input_skipped() const {
    const auto *exec = torch::autograd::get_current_graph_task_exec_info();
    if (exec == nullptr || exec->empty()) return false;
    auto node = input.lock();
    if (!node) return false;
    auto it = exec->find(node.get());
    return it == exec->end() || !it->second.should_execute();
  }

  // hands `total` on to fn (under the GIL), unless Python is finishing; Ellipsis for an undefined total the pass
  // does not compute (input_skipped)
  void deliver(at::Tensor total) {
    if (!python_alive()) return;
    bool skipped = !total.defined() && input_skipped();
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *grad;
    if (skipped) {
      grad = Py_Ellipsis;
      Py_INCREF(grad);
    } else {
      grad = wrap_grad(std::move(total));
    }
    fn.call(grad);
    Py_XDECREF(grad);
    PyGILState_Release(st);
  }
};

// At the end of pass `task`: the share's sum so far, if some of its contributions never came in it
void end_of_pass(const std::weak_ptr<Share> &weak, int task) {
  auto share = weak.lock();
  if (!share) return;
  at::Tensor total;
  {
    std::lock_guard<std::mutex> guard(share->lock);
    if (share->task != task || share->remaining == 0) return;
    share->remaining = 0;
    total = std::move(share->sum);
    share->sum = at::Tensor();
  }
  share->deliver(std::move(total));
}

struct ShareHook : torch::autograd::FunctionPostHook {
  std::shared_ptr<Share> share;
  size_t slot;  // which of the node's outgoing gradients goes to the input
  const torch::autograd::Node *node;   // the node it is a hook of (which owns it: never dangling)

  ShareHook(std::shared_ptr<Share> s, size_t j, const torch::autograd::Node *n) : share(std::move(s)), slot(j), node(n) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list &outputs,
                                            const torch::autograd::variable_list &) override {
    at::Tensor total;
    {
      std::lock_guard<std::mutex> guard(share->lock);
      int task = torch::autograd::get_current_graph_task_id();
      bool first = share->remaining == 0 || task != share->task;
      if (first) {
        if (share->remaining == 0 && task == share->task) return outputs;   // (handed on in this pass already)
        share->remaining = share->running_now(node);   // this pass's (a later one gathers it anew)
        share->sum = at::Tensor();
      }
      share->task = task;
      if (slot < outputs.size() && outputs[slot].defined()) {
        at::NoGradGuard no_grad;
        share->sum = share->sum.defined() ? at::add(share->sum, outputs[slot]) : outputs[slot];
      }
      if (--share->remaining > 0) {
        if (first) {
          std::weak_ptr<Share> weak = share;
          torch::autograd::Engine::get_default_engine().queue_callback([weak, task] { end_of_pass(weak, task); });
        }
        return outputs;
      }
      total = std::move(share->sum);
      share->sum = at::Tensor();
    }
    share->deliver(std::move(total));
    return outputs;  // the gradients go on unchanged
  }
};

// The tensors an object (a module) holds as attributes, directly or in a list, tuple or dict attribute, and those
// of the modules inside it (its `_modules`, to the leaves), borrowed from their __dict__s (`dicts`, new references
// the caller releases): a value the module computed and kept rather than returned (an MoE router's
// `self.aux_loss`, added to the loss by the caller) is made by the call's nodes too, and so is one a module inside
// it keeps (`self.inner.aux_loss`, the outer module's own input share in msprobe, whose node after the outer
// module's inputs sums every use inside). A value a module kept from an earlier call has no node of this call's
// (hook_consumers walks only those), so stale attributes add nothing.
std::vector<PyObject *> tensor_attributes(PyObject *owner, std::vector<PyObject *> &dicts) {
  std::vector<PyObject *> found;
  if (owner == Py_None) return found;
  // (by the real type: THPVariable_Check asks isinstance(), which may run an attribute's __class__ property, and
  // throws what that raises)
  auto tensor = [](PyObject *v) { return PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject *>(THPVariableClass)); };
  auto take = [&found, &tensor](PyObject *v) {
    if (tensor(v)) found.push_back(v);
  };
  std::vector<PyObject *> todo{owner};   // (borrowed: each held by the __dict__ of the module above it)
  std::unordered_set<PyObject *> seen{owner};
  while (!todo.empty()) {
    PyObject *obj = todo.back();
    todo.pop_back();
    PyObject *d = PyObject_GenericGetDict(obj, nullptr);
    if (d == nullptr || !PyDict_Check(d)) {   // (no __dict__: nothing kept)
      PyErr_Clear();
      Py_XDECREF(d);
      continue;
    }
    dicts.push_back(d);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &value)) {
      if (tensor(value)) {
        found.push_back(value);
      } else if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {
        // (a list attribute is borrowed as it is: nothing here runs Python code that could change it)
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        PyObject **items = PySequence_Fast_ITEMS(value);
        for (Py_ssize_t i = 0; i < n; ++i) take(items[i]);
      } else if (PyDict_Check(value) && PyUnicode_Check(key) && PyUnicode_GET_LENGTH(key) > 0) {
        PyObject *k2, *v2;
        Py_ssize_t p2 = 0;
        if (PyUnicode_READ_CHAR(key, 0) != '_') {
          // (not the module's own _parameters, _buffers and hook dicts)
          if (PyDict_CheckExact(value))
            while (PyDict_Next(value, &p2, &k2, &v2)) take(v2);
        } else if (PyUnicode_CompareWithASCIIString(key, "_modules") == 0) {
          // the modules inside (an OrderedDict in older torch), each once: a module shared by two parents, or one
          // that holds itself
          while (PyDict_Next(value, &p2, &k2, &v2))
            if (v2 != Py_None && seen.insert(v2).second) todo.push_back(v2);
        }
      }
    }
  }
  return found;
}

// hook_consumers(start, outputs, fn[, owner]) -> (counts, used): counts[i], for input i of call_start, how many of
// the call's nodes send it a gradient (each hooked; fn(i, share) comes after the last; fn(i, Ellipsis) where the
// pass computes no gradient for the input: Share::input_skipped). 0: none does (an unused
// input, or one the call returns as it is). -1: none does, and the call changed the input in place: a view, whose
// in-place change the engine sends to its base's history through a CopySlices node, past the view's own (the share
// is not known). The call's nodes are those reached from `outputs` and from the tensor attributes of `owner` (the
// module, and the modules inside it: tensor_attributes; None for none). `used`: the positions in `outputs` of the outputs that the call's own nodes consume too,
// and of the inputs it returns as they came: their gradient is a watch's (_cgrad_watch.h).
PyObject *hook_consumers(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if ((nargs != 3 && nargs != 4) || !PyCapsule_IsValid(args[0], kCallStart) || !PyCallable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "hook_consumers(start, outputs, fn[, owner]): call_start's capsule, tensors, a callable, an object");
    return nullptr;
  }
  auto *cs = static_cast<CallStart *>(PyCapsule_GetPointer(args[0], kCallStart));
  PyObject *seq = PySequence_Fast(args[1], "hook_consumers: outputs, a list or tuple of tensors");
  if (seq == nullptr) return nullptr;
  using torch::autograd::Node;
  const size_t n_in = cs->edges.size();
  std::vector<std::vector<std::pair<Node *, size_t>>> found(n_in);
  // the outputs made by the call's nodes, as edges (an input returned as it is has no consumer of its own here)
  std::vector<std::pair<Node *, uint32_t>> out_edges;
  std::vector<Py_ssize_t> out_pos;
  std::vector<bool> used;
  std::vector<PyObject *> dicts;   // (hold the attributes borrowed in `kept`)
  std::vector<PyObject *> kept = tensor_attributes(nargs == 4 ? args[3] : Py_None, dicts);
  auto release = [&dicts] {
    for (PyObject *d : dicts) Py_DECREF(d);
  };
  try {
    auto made_here = [cs](Node *node) {
      uint64_t nr = node->sequence_nr();
      // (UINT64_MAX: AccumulateGrad, a leaf's)
      return nr >= cs->first && nr != UINT64_MAX && node->thread_id() == cs->thread;
    };
    // an input the call returns as it came (its node not the call's, its edge an input's): used too, as other calls
    // may have consumed it before
    Py_ssize_t n_out = PySequence_Fast_GET_SIZE(seq);
    PyObject **outs = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n_out; ++k) {
      if (!THPVariable_Check(outs[k])) continue;
      const at::Tensor &o = THPVariable_Unpack(outs[k]);
      auto fn = o.grad_fn();
      if (!fn || made_here(fn.get())) continue;
      uint32_t nr = static_cast<uint32_t>(o.output_nr());
      for (const auto &edge : cs->edges) {
        if (edge.function.get() == fn.get() && edge.input_nr == nr) {
          out_edges.emplace_back(nullptr, nr);   // (no node of the call's: nothing in the walk matches it)
          out_pos.push_back(k);
          used.push_back(true);
          break;
        }
      }
    }
    walk_back(
        seq, made_here,
        [&](Py_ssize_t k, const at::Tensor &o, Node *fn) {
          out_edges.emplace_back(fn, static_cast<uint32_t>(o.output_nr()));
          out_pos.push_back(k);
          used.push_back(false);
        },
        [&](Node *node, size_t j, Node *next) {
          uint32_t nr = node->next_edges()[j].input_nr;
          for (size_t i = 0; i < n_in; ++i) {
            if (cs->edges[i].function.get() == next && cs->edges[i].input_nr == nr) found[i].emplace_back(node, j);
          }
          if (!made_here(next)) return;
          for (size_t k = 0; k < out_edges.size(); ++k) {
            if (out_edges[k].first == next && out_edges[k].second == nr) used[k] = true;
          }
        },
        kept);
    for (size_t i = 0; i < n_in; ++i) {
      if (found[i].empty()) continue;
      PyObject *index = PyLong_FromSize_t(i);
      if (index == nullptr) throw std::bad_alloc();
      auto share = std::make_shared<Share>(args[2], index, cs->edges[i].function);
      Py_DECREF(index);
      for (auto &[node, j] : found[i]) {
        share->nodes.emplace_back(node->getptr());
        node->add_post_hook(std::make_unique<ShareHook>(share, j, node));
      }
    }
  } catch (const std::exception &exc) {
    Py_DECREF(seq);
    release();
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  Py_DECREF(seq);
  release();
  PyObject *counts = PyTuple_New(static_cast<Py_ssize_t>(n_in));
  if (counts == nullptr) return nullptr;
  for (size_t i = 0; i < n_in; ++i) {
    const auto &[counter, was] = cs->versions[i];
    bool changed = found[i].empty() && counter.enabled() && counter.current_version() != was;
    PyTuple_SET_ITEM(counts, static_cast<Py_ssize_t>(i),
                     changed ? PyLong_FromLong(-1) : PyLong_FromSize_t(found[i].size()));
  }
  std::vector<Py_ssize_t> in_order;
  for (size_t k = 0; k < used.size(); ++k)
    if (used[k]) in_order.push_back(out_pos[k]);
  std::sort(in_order.begin(), in_order.end());
  PyObject *positions = PyTuple_New(static_cast<Py_ssize_t>(in_order.size()));   // (the empty tuple, as a rule)
  if (positions == nullptr) {
    Py_DECREF(counts);
    return nullptr;
  }
  for (size_t m = 0; m < in_order.size(); ++m)
    PyTuple_SET_ITEM(positions, static_cast<Py_ssize_t>(m), PyLong_FromSsize_t(in_order[m]));
  PyObject *result = PyTuple_Pack(2, counts, positions);
  Py_DECREF(counts);
  Py_DECREF(positions);
  return result;
}
