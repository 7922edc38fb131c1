/* dumps_nonfinite(obj, dumps, nan, inf, ninf): orjson's speed for a tree that holds NaN or +-Infinity floats.

   The reference writes a NaN or infinite statistic as the JSON extensions NaN / Infinity / -Infinity, which the
   json module's encoder writes and orjson does not (it writes null). A step holds one as soon as a module takes
   an attention mask of -inf, or a tensor overflows, which is when a user is debugging; the json module's C
   encoder takes about 15x orjson's time over a step's dump.json (460 us against 31 us for 45 kB, a cost that
   falls on the training process). So here each non-finite float in the tree is swapped for a pre-serialised
   fragment (orjson.Fragment(b"NaN") etc.), `dumps` is called, and the floats are put back, all in one call:
   the GIL is held throughout, so no other thread sees the fragments (the collector's statistics cache hands out
   copies of the same item dicts).

   Walks exact dicts and lists (values only: keys are strings), and exact tuples, which it does not change. Returns
   None, having changed nothing, when the tree holds anything it cannot vouch for: a non-finite float inside a
   tuple or of a float subclass, a container of another type (a subclass orjson may encode its own way), or a
   nesting deeper than MAX_DEPTH; the caller then takes the json module. Strings, ints, bools, None and finite
   floats are left to `dumps`. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define MAX_DEPTH 64

typedef struct {
    PyObject *container;   /* borrowed: the tree holds it */
    PyObject *key;         /* a dict's key (borrowed), or NULL for a list */
    Py_ssize_t index;
    PyObject *original;    /* a new reference to the float taken out */
} Swap;

typedef struct {
    Swap *items;
    Py_ssize_t n, cap;
    PyObject *frag[3];     /* nan, inf, ninf */
} Swaps;

/* 1: swap, 0: leave, -1: refuse the tree */
static int classify(PyObject *v, PyObject **frag, Swaps *s) {
    if (PyFloat_CheckExact(v)) {
        double x = PyFloat_AS_DOUBLE(v);
        if (isfinite(x))
            return 0;
        *frag = isnan(x) ? s->frag[0] : (x > 0 ? s->frag[1] : s->frag[2]);
        return 1;
    }
    if (PyFloat_Check(v))
        return -1;
    return 0;
}

static int push(Swaps *s, PyObject *container, PyObject *key, Py_ssize_t index, PyObject *original) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 16;
        Swap *items = PyMem_Realloc(s->items, (size_t)cap * sizeof(Swap));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->items = items;
        s->cap = cap;
    }
    Py_INCREF(original);
    s->items[s->n++] = (Swap){container, key, index, original};
    return 0;
}

static void restore(Swaps *s) {
    for (Py_ssize_t i = s->n - 1; i >= 0; i--) {
        Swap *w = &s->items[i];
        if (w->key != NULL) {
            /* (cannot fail: the key is in the dict, so no resize) */
            if (PyDict_SetItem(w->container, w->key, w->original) < 0)
                PyErr_Clear();
            Py_DECREF(w->original);
        } else {
            PyObject *old = PyList_GET_ITEM(w->container, w->index);
            PyList_SET_ITEM(w->container, w->index, w->original);   /* (steals the reference held) */
            Py_DECREF(old);
        }
    }
    s->n = 0;
}

static int is_container(PyObject *v) {
    return PyDict_CheckExact(v) || PyList_CheckExact(v) || PyTuple_CheckExact(v);
}

static int walk(PyObject *obj, Swaps *s, int depth);

/* A value that is no float to swap: a plain container is walked, a subclass of one refused (the json module
   writes it as it would), anything else left. Returns as walk does. */
static int descend(PyObject *value, Swaps *s, int depth) {
    if (is_container(value))
        return walk(value, s, depth + 1);
    if (PyDict_Check(value) || PyList_Check(value) || PyTuple_Check(value))
        return 1;
    return 0;
}

/* 0: walked, 1: refuse (nothing raised), -1: error raised. Swaps made so far stay in `s` for restore. */
static int walk(PyObject *obj, Swaps *s, int depth) {
    if (depth > MAX_DEPTH)
        return 1;
    PyObject *frag;
    if (PyDict_CheckExact(obj)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(obj, &pos, &key, &value)) {
            int c = classify(value, &frag, s);
            if (c < 0)
                return 1;
            if (c > 0) {
                if (push(s, obj, key, 0, value) < 0)
                    return -1;
                /* (replacing the value of a key already present does not resize: PyDict_Next may go on) */
                if (PyDict_SetItem(obj, key, frag) < 0)
                    return -1;
            } else {
                int r = descend(value, s, depth);
                if (r)
                    return r;
            }
        }
        return 0;
    }
    if (PyList_CheckExact(obj)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(obj); i++) {
            PyObject *value = PyList_GET_ITEM(obj, i);
            int c = classify(value, &frag, s);
            if (c < 0)
                return 1;
            if (c > 0) {
                if (push(s, obj, NULL, i, value) < 0)
                    return -1;
                Py_INCREF(frag);
                PyList_SET_ITEM(obj, i, frag);
                Py_DECREF(value);   /* (still held by the swap) */
            } else {
                int r = descend(value, s, depth);
                if (r)
                    return r;
            }
        }
        return 0;
    }
    if (PyTuple_CheckExact(obj)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); i++) {
            PyObject *value = PyTuple_GET_ITEM(obj, i);
            int c = classify(value, &frag, s);
            if (c != 0)
                return 1;   /* (a tuple is not changed in place: the json module writes this one) */
            int r = descend(value, s, depth);
            if (r)
                return r;
        }
        return 0;
    }
    return 1;
}

static PyObject *dumps_nonfinite(PyObject *self, PyObject *args) {
    PyObject *obj, *dumps;
    Swaps s = {NULL, 0, 0, {NULL, NULL, NULL}};
    if (!PyArg_ParseTuple(args, "OOOOO", &obj, &dumps, &s.frag[0], &s.frag[1], &s.frag[2]))
        return NULL;
    int r = is_container(obj) ? walk(obj, &s, 0) : 1;
    PyObject *out = NULL;
    if (r == 0) {
        out = PyObject_CallOneArg(dumps, obj);
    } else if (r == 1) {
        out = Py_NewRef(Py_None);
    }
    /* (the floats go back whatever happened, an exception from dumps included) */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    restore(&s);
    PyErr_Restore(et, ev, tb);
    PyMem_Free(s.items);
    return out;
}

static PyMethodDef methods[] = {
    {"dumps_nonfinite", dumps_nonfinite, METH_VARARGS,
     "dumps_nonfinite(obj, dumps, nan, inf, ninf) -> dumps(obj) with each NaN/Inf/-Inf float swapped for nan, inf "
     "or ninf during the call, or None when the tree holds what it cannot vouch for (see the source's top "
     "comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cjson",
                                    "orjson's speed for trees holding NaN or infinite floats.", -1, methods};

PyMODINIT_FUNC PyInit__cjson(void) { return PyModule_Create(&module); }
