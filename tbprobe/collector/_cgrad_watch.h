// _cgrad's watched outputs: the gradient of a module output that the module also uses itself (included by
// _cgrad.cpp, inside its anonymous namespace).
#pragma once

// A module's output gradient, as the reference reports it, is what the consumers after the call send to the
// output: its full backward hook puts an identity node after each output. tbprobe hooks the node that made the
// output (GradHook), whose incoming gradient is the sum over every consumer. The two are the same unless the
// call itself consumes what it returns: an MoE block's router logits (routed inside, returned for the auxiliary
// loss), T5's position bias (used by the first layer's attention, returned for the next ones). For such an output
// (hook_consumers finds the call's nodes with an edge to it) the GradHook reports a Watch's sum instead: the
// contributions of the consumers after the call, each hooked (ExternalHook, after its backward), summed in the
// order they arrive, as the identity node's buffer sums them. Nothing is added to the graph, so the output's own
// gradient and everything after it are the training's, bit for bit.
//
// Those consumers exist only once the forward pass is over. A backward pass's roots reach every one of them (a
// node is made after what it consumes), so just before the pass starts (the wrappers of torch.autograd.backward
// and .grad, later_consumers.py) `discover` walks from the roots over the nodes made after each watched call, on
// its thread, and hooks them. A watch no pass looked for (the engine started some other way) keeps the total.
// A weak pointer of the kind torch holds nodes by (shared or intrusive, by torch version)
template <class P> struct WeakOf;
template <class T> struct WeakOf<std::shared_ptr<T>> { using type = std::weak_ptr<T>; };
template <class T, class N> struct WeakOf<c10::intrusive_ptr<T, N>> { using type = c10::weak_intrusive_ptr<T, N>; };
using NodePtr = std::remove_cvref_t<decltype(std::declval<at::Tensor>().grad_fn())>;
using WeakNode = WeakOf<NodePtr>::type;

struct Watch {
  WeakNode node;      // (weak: a watch must not keep a step's graph alive)
  uint32_t input_nr;                          // the output's place among its node's incoming gradients
  uint64_t end, thread;                       // the nodes after the call: numbered from `end` on, on `thread`
  std::mutex lock;
  at::Tensor sum;          // what the consumers after the call sent, so far in this backward pass
  bool discovered = false; // a pass looked for them: the sum is the output's gradient
  uint64_t seeded = 0;     // the discover call whose root gradient the sum holds, not yet taken (0: none)
  std::set<std::pair<const torch::autograd::Node *, size_t>> hooked;  // (consumer, edge) already hooked

  Watch(const NodePtr &n, uint32_t nr, uint64_t e, uint64_t t) : node(n), input_nr(nr), end(e), thread(t) {}
};

// The watches of the current step (touched only from Python calls, with the GIL; clear_watches at each step end).
// Never destroyed: at exit a static destructor would run after the interpreter, and a tensor left in a watch may
// hold a Python object.
std::vector<std::shared_ptr<Watch>> &watches = *new std::vector<std::shared_ptr<Watch>>();

struct ExternalHook : torch::autograd::FunctionPostHook {
  std::shared_ptr<Watch> watch;
  size_t slot;  // which of the node's outgoing gradients goes to the watched output

  ExternalHook(std::shared_ptr<Watch> w, size_t j) : watch(std::move(w)), slot(j) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list &outputs,
                                            const torch::autograd::variable_list &) override {
    if (slot < outputs.size() && outputs[slot].defined()) {
      at::NoGradGuard no_grad;
      std::lock_guard<std::mutex> guard(watch->lock);
      watch->sum = watch->sum.defined() ? at::add(watch->sum, outputs[slot]) : outputs[slot];
    }
    return outputs;  // the gradients go on unchanged
  }
};

// The gradient a GradHook reports for a watched output: the sum after the call, taken (the next pass starts anew);
// undefined when no consumer after the call sent one (the output is not used after the call: null, as in the
// reference). `fallback` when no pass looked for the consumers.
at::Tensor watch_take(Watch &w, const at::Tensor &fallback) {
  std::lock_guard<std::mutex> guard(w.lock);
  if (!w.discovered) return fallback;
  at::Tensor out = std::move(w.sum);
  w.sum = at::Tensor();
  w.seeded = 0;
  return out;
}

// discover(roots[, grads[, token]]) -> int: hook the consumers after each watched call among the nodes `roots`
// (tensors) reach; returns how many were hooked. Nothing to do, at once, when nothing is watched. A root that is a
// watched output itself (`y.backward(g)`, `autograd.backward([loss, y], [None, g])`) starts its watch's sum with
// the gradient the pass gives it: `grads[k]` (a list as long as `roots`; None, or no list: ones for a one-element
// root, as the engine takes), in the root's dtype, as the reference's identity node after the output gets it
// first. `token` (a positive int) names the seeds for drop_seeds, once the pass is over: a seed the pass never
// took (its node did not run, or torch refused the call) must not reach a later pass.
PyObject *discover(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 3) {
    PyErr_SetString(PyExc_TypeError, "discover(roots[, grads[, token]]): tensors, their gradients, an int");
    return nullptr;
  }
  uint64_t token = nargs == 3 ? PyLong_AsUnsignedLongLong(args[2]) : 0;
  if (token == static_cast<uint64_t>(-1) && PyErr_Occurred()) return nullptr;
  if (watches.empty()) return PyLong_FromLong(0);
  PyObject *seq = PySequence_Fast(args[0], "discover(roots): a list or tuple of tensors");
  if (seq == nullptr) return nullptr;
  PyObject *grads = nullptr;
  if (nargs >= 2 && args[1] != Py_None) {
    grads = PySequence_Fast(args[1], "discover(roots, grads): grads, a list or tuple as long as roots");
    if (grads == nullptr || PySequence_Fast_GET_SIZE(grads) != PySequence_Fast_GET_SIZE(seq)) {
      if (grads != nullptr) PyErr_SetString(PyExc_ValueError, "discover(roots, grads): grads as long as roots");
      Py_XDECREF(grads);
      Py_DECREF(seq);
      return nullptr;
    }
  }
  using torch::autograd::Node;
  long hooked = 0;
  try {
    // the watched edges by node, and the first node number after a watched call, per thread
    std::unordered_map<const Node *, std::vector<std::shared_ptr<Watch>>> by_node;
    std::unordered_map<uint64_t, uint64_t> first_after;
    for (auto &w : watches) {
      auto node = w->node.lock();
      if (!node) continue;
      by_node[node.get()].push_back(w);
      auto it = first_after.find(w->thread);
      if (it == first_after.end() || w->end < it->second) first_after[w->thread] = w->end;
    }
    auto after = [&first_after](const Node *n) {
      auto it = first_after.find(n->thread_id());
      return it != first_after.end() && n->sequence_nr() >= it->second && n->sequence_nr() != UINT64_MAX;
    };
    Py_ssize_t n_roots = PySequence_Fast_GET_SIZE(seq);
    PyObject **roots = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n_roots; ++k) {
      if (!THPVariable_Check(roots[k])) continue;
      const at::Tensor &root = THPVariable_Unpack(roots[k]);
      auto fn = root.grad_fn();
      auto found = fn ? by_node.find(fn.get()) : by_node.end();
      if (found == by_node.end()) continue;
      at::Tensor g;
      PyObject *given = grads != nullptr ? PySequence_Fast_ITEMS(grads)[k] : Py_None;
      if (THPVariable_Check(given)) {
        g = THPVariable_Unpack(given);
      } else if (given == Py_None && root.numel() == 1) {   // (anything else: no seed)
        at::NoGradGuard no_grad;
        g = at::ones_like(root, at::MemoryFormat::Preserve);
      }
      // (a gradient of another shape torch refuses, or sums to the root's: left out)
      if (!g.defined() || !g.sizes().equals(root.sizes())) continue;
      at::NoGradGuard no_grad;
      if (g.scalar_type() != root.scalar_type()) g = g.to(root.scalar_type());   // (as the engine casts it)
      for (auto &w : found->second) {
        if (w->input_nr != static_cast<uint32_t>(root.output_nr())) continue;
        std::lock_guard<std::mutex> guard(w->lock);
        w->sum = w->sum.defined() ? at::add(w->sum, g) : g;
        w->seeded = token;
      }
    }
    walk_back(seq, after, [](Py_ssize_t, const at::Tensor &, Node *) {}, [&](Node *node, size_t j, Node *next) {
      auto found = by_node.find(next);
      if (found == by_node.end()) return;
      for (auto &w : found->second) {
        // (a node made after the watched call that sends its output a gradient: a consumer after the call)
        const auto &edge = node->next_edges()[j];
        if (w->input_nr != edge.input_nr || node->sequence_nr() < w->end || node->thread_id() != w->thread) continue;
        std::lock_guard<std::mutex> guard(w->lock);
        if (w->hooked.emplace(node, j).second) {
          node->add_post_hook(std::make_unique<ExternalHook>(w, j));
          ++hooked;
        }
      }
    });
    for (auto &w : watches) {
      std::lock_guard<std::mutex> guard(w->lock);
      w->discovered = true;
    }
  } catch (const std::exception &exc) {
    Py_DECREF(seq);
    Py_XDECREF(grads);
    PyErr_SetString(PyExc_RuntimeError, exc.what());
    return nullptr;
  }
  Py_DECREF(seq);
  Py_XDECREF(grads);
  return PyLong_FromLong(hooked);
}

// drop_seeds(token) -> None: after the pass discover(..., token) came before, forget what the watches it seeded
// still hold (their nodes did not run in it)
PyObject *drop_seeds(PyObject *, PyObject *arg) {
  uint64_t token = PyLong_AsUnsignedLongLong(arg);
  if (token == static_cast<uint64_t>(-1) && PyErr_Occurred()) return nullptr;
  for (auto &w : watches) {
    std::lock_guard<std::mutex> guard(w->lock);
    if (token != 0 && w->seeded == token) {
      w->sum = at::Tensor();
      w->seeded = 0;
    }
  }
  Py_RETURN_NONE;
}

PyObject *clear_watches(PyObject *, PyObject *) {
  watches.clear();
  Py_RETURN_NONE;
}

PyObject *watching(PyObject *, PyObject *) { return PyBool_FromLong(!watches.empty()); }
