/* untrack_tree: takes a finished dump.json record out of the cyclic garbage collector (part of _cstats.c).

   A step's records stay alive from the hook that makes them until the writer thread has written them: long
   enough to live through one or two of the collector's young-generation passes and be promoted to the oldest
   generation. CPython runs a full collection once the promoted objects reach a quarter of the long-lived ones,
   and with torch imported a full collection walks some 400k objects (0.2-0.3 s here): about one every hundred
   steps at L0, a cost of the same size as the training step itself, and none without tbprobe. A record is a
   tree of dicts, lists and tuples over strings, numbers, booleans and None, which can hold no reference cycle,
   so the collector has nothing to find in it: leaving it untracked is what CPython itself does for tuples and
   dicts of atomic values, only earlier. Reference counting still frees every part when the step is written.

   A container is untracked only when everything in it is untracked (checked bottom-up); anything else (an
   object of another type, a tree deeper than MAX_DEPTH) keeps itself and its ancestors tracked, as before. */

#define UNTRACK_MAX_DEPTH 32

static int untrack_node(PyObject *o, int depth) {
    if (!PyObject_IS_GC(o))
        return 1;                   /* str, int, float, bool, None: not in the collector at all */
    if (!PyObject_GC_IsTracked(o))
        return 1;
    if (depth >= UNTRACK_MAX_DEPTH)
        return 0;
    int all = 1;
    if (PyDict_CheckExact(o)) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &key, &value)) {
            if (!untrack_node(key, depth + 1) || !untrack_node(value, depth + 1))
                all = 0;
        }
    } else if (PyList_CheckExact(o)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); i++)
            if (!untrack_node(PyList_GET_ITEM(o, i), depth + 1))
                all = 0;
    } else if (PyTuple_CheckExact(o)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!untrack_node(PyTuple_GET_ITEM(o, i), depth + 1))
                all = 0;
    } else {
        return 0;
    }
    if (all)
        PyObject_GC_UnTrack(o);
    return all;
}

static PyObject *untrack_tree(PyObject *mod, PyObject *o) {
    return PyBool_FromLong(untrack_node(o, 0));
}
