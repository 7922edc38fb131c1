/* stack_key: the identity of a call stack as a tuple of ints, in one C call (part of _cstats.c).

   Every recorded call gets its stack (stack.json), and the collector keys it by the chain of (code object, byte
   offset of the instruction) pairs from the hook up to the outermost frame, leaving out tbprobe's own frames;
   each unique key is formatted into lines once per process (tbprobe/collector/pytorch/session.py). Walking 15
   to 30 frames in Python costs about 8 us a call; the same walk here costs about 1 us.

   stack_key(frame, own, prefix, codes) -> tuple: `own` maps id(code) -> bool (is it tbprobe's own code: its
   co_filename starts with `prefix`), decided once per code object, or None for torch's handle_torch_function,
   which the caller puts there: a function written in Python hands itself to the operator mode through it, and the
   mode may run its body again (backward_pass.py), so the stack of a call inside `loss.backward()` held
   Tensor.backward twice with that frame between. Such a frame is left out, and so are the frames above it that
   repeat the codes of the frames kept just below it (the body run again: one frame for F.relu, two for
   F.max_pool2d's dispatcher and the function it picks; the shortest repeat is taken): the reference, which
   patches functions, sees one call. `codes` maps
   id(code) -> code and keeps every code object seen alive, so its id is never reused by another one. The key is
   (id(code), f_lasti, id(code), f_lasti, ...), innermost first: the same ints Python's frame.f_code and
   frame.f_lasti give. */

static PyObject *s_co_filename;
#define MAX_MARKS 32

static int frame_lasti(PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetLasti(f);
#else
    PyObject *v = PyObject_GetAttrString((PyObject *)f, "f_lasti");
    int lasti = v ? (int)PyLong_AsLong(v) : -1;
    Py_XDECREF(v);
    PyErr_Clear();
    return lasti;
#endif
}

/* 1 if the code object is tbprobe's own, 2 if it is a dispatch frame (None in `own`), 0 if neither, -1 with an
   exception. */
static int own_code(PyObject *code, PyObject *id, PyObject *own, PyObject *prefix, PyObject *codes) {
    PyObject *known = PyDict_GetItemWithError(own, id);   /* borrowed */
    if (known != NULL)
        return known == Py_True ? 1 : known == Py_None ? 2 : 0;
    if (PyErr_Occurred())
        return -1;
    PyObject *filename = PyObject_GetAttr(code, s_co_filename);
    if (filename == NULL)
        return -1;
    int mine = PyUnicode_Check(filename) ? (int)PyUnicode_Tailmatch(filename, prefix, 0, PY_SSIZE_T_MAX, -1) : 0;
    Py_DECREF(filename);
    if (mine < 0)
        return -1;
    if (PyDict_SetItem(own, id, mine ? Py_True : Py_False) < 0 || PyDict_SetItem(codes, id, code) < 0)
        return -1;
    return mine;
}

static PyObject *stack_key(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyFrame_Check(args[0]) || !PyDict_Check(args[1]) || !PyUnicode_Check(args[2]) ||
        !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "stack_key(frame, own: dict, prefix: str, codes: dict)");
        return NULL;
    }
    PyObject *own = args[1], *prefix = args[2], *codes = args[3];
    PyObject *key = PyList_New(0);
    if (key == NULL)
        return NULL;
    PyFrameObject *f = (PyFrameObject *)args[0];
    Py_INCREF(f);
    /* where dispatch frames were passed: the number of frames kept below each (the first MAX_MARKS) */
    Py_ssize_t marks[MAX_MARKS];
    int nmarks = 0;
    while (f != NULL) {
        PyObject *code = (PyObject *)PyFrame_GetCode(f);   /* new reference */
        PyObject *id = PyLong_FromVoidPtr(code);
        int mine = id ? own_code(code, id, own, prefix, codes) : -1;
        if (mine == 2) {
            Py_ssize_t kept = PyList_GET_SIZE(key) / 2;
            if (nmarks < MAX_MARKS && (nmarks == 0 || marks[nmarks - 1] != kept))
                marks[nmarks++] = kept;
        } else if (mine == 0) {
            PyObject *lasti = PyLong_FromLong(frame_lasti(f));
            if (lasti == NULL || PyList_Append(key, id) < 0 || PyList_Append(key, lasti) < 0)
                mine = -1;
            Py_XDECREF(lasti);
        }
        Py_XDECREF(id);
        Py_DECREF(code);
        if (mine < 0) {
            Py_DECREF(f);
            Py_DECREF(key);
            return NULL;
        }
        PyFrameObject *back = PyFrame_GetBack(f);          /* new reference or NULL */
        Py_DECREF(f);
        f = back;
    }
    /* the outermost first, so that the marks below stay where they were */
    for (int k = nmarks - 1; k >= 0; k--) {
        Py_ssize_t m = marks[k], total = PyList_GET_SIZE(key) / 2;
        for (Py_ssize_t n = 1; n <= m && m + n <= total; n++) {
            int same = 1;
            for (Py_ssize_t i = 0; i < n && same; i++)
                same = PyLong_AsVoidPtr(PyList_GET_ITEM(key, 2 * (m + i))) ==
                       PyLong_AsVoidPtr(PyList_GET_ITEM(key, 2 * (m - n + i)));
            if (same) {
                if (PyList_SetSlice(key, 2 * m, 2 * (m + n), NULL) < 0) {
                    Py_DECREF(key);
                    return NULL;
                }
                break;
            }
        }
    }
    PyObject *out = PyList_AsTuple(key);
    Py_DECREF(key);
    return out;
}
