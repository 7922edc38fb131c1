// _cgrad's ItemReader (included by _cgrad.cpp, inside its anonymous namespace).
#pragma once

// The item of a plain CPU tensor (_cstats_items.h says which; of any size here, since the reader remembers what it
// summarised, where HostItems alone leaves large tensors to the Python path), with its facts (type, layout, device,
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
tbprobe_item_api item_api = {nullptr, nullptr, nullptr};

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
    // (an inference tensor has no version counter; a Parameter may be written without a bump, through .data: an
    // EMA, a hand-written optimizer. The exact check above leaves Tensor or Parameter, so not Tensor is Parameter)
    bool versioned = !x.is_inference() && Py_TYPE(t) == reinterpret_cast<PyTypeObject *>(THPVariableClass);
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
    PyObject *item = item_api.item_from_facts_any(self->host_items, t, dtype, sizes.data(),
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

// forget(t): t and every tensor remembered that shares its memory (a view of a flat gradient buffer that a
// collective reduced: the view's version did not move either)
PyObject *reader_forget(PyObject *self, PyObject *t) {
  auto *r = reinterpret_cast<ItemReader *>(self);
  // (by the real type: THPVariable_Check asks isinstance(), which may run a subclass's __class__ property)
  if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject *>(THPVariableClass))) Py_RETURN_NONE;
  try {
    const at::Tensor &x = THPVariable_Unpack(t);
    auto it = r->seen->find(x.unsafeGetTensorImpl());
    if (it != r->seen->end()) reader_drop(r, it);
    if (!x.defined() || !x.has_storage()) Py_RETURN_NONE;
    const c10::StorageImpl *storage = x.storage().unsafeGetStorageImpl();
    for (auto e = r->seen->begin(); e != r->seen->end();) {
      auto alive = e->second.impl.lock();
      if (!alive || (alive->has_storage() && alive->storage().unsafeGetStorageImpl() == storage)) {
        Py_DECREF(e->second.item);
        e = r->seen->erase(e);
      } else {
        ++e;
      }
    }
  } catch (const std::exception &) {
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
