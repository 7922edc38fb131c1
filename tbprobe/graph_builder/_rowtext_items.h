/* Row text of dump items and entries held as Python objects (entry_texts).
   Part of _rowtext.c, which includes it once (a unity build: the module is one translation unit). */

/* ----------------------------------------------------------------------------------------------- items */


static int key_is(PyObject *k, const char *name) {
    size_t len = strlen(name);
    return PyUnicode_CheckExact(k) && PyUnicode_IS_ASCII(k) && (size_t)PyUnicode_GET_LENGTH(k) == len &&
           memcmp(PyUnicode_1BYTE_DATA(k), name, len) == 0;
}

/* A statistic's text as items.std_text makes it: float.__repr__ or int.__repr__; 1 for another type. */
static int put_stat(Buf *b, PyObject *v) {
    if (PyFloat_CheckExact(v))
        return put_float(b, PyFloat_AS_DOUBLE(v));
    if (PyLong_CheckExact(v))
        return put_int(b, v);
    return 1;
}

/* str(shape) of a list of exact ints, "[4, 1, 5120]"; 1 for anything else. */
static int shape_ok(PyObject *shape) {
    if (!PyList_CheckExact(shape))
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(shape); i++)
        if (!PyLong_CheckExact(PyList_GET_ITEM(shape, i)))
            return 0;
    return 1;
}

static int put_shape(Buf *b, PyObject *shape) {
    if (PUT_LIT(b, "[") < 0)
        return -1;
    /* ints have no Python-level repr to call: the list cannot change under us */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(shape); i++) {
        if (i && PUT_LIT(b, ", ") < 0)
            return -1;
        if (put_int(b, PyList_GET_ITEM(shape, i)) < 0)
            return -1;
    }
    return PUT_LIT(b, "]");
}

static const char *grad_text(PyObject *g) {
    if (g == Py_True)
        return "True";
    if (g == Py_False)
        return "False";
    if (g == Py_None)
        return "null";
    return NULL;
}

static int put_std_fields(Buf *b, PyObject *const *v);

/* items.std_text of a standard statistics item with float/int statistics, a list-of-ints shape and a
   True/False/None requires_grad: 0 written, 1 not such an item (nothing written), -1 error. On 1 or -1 the
   buffer may hold a partial text: the caller rewinds. */
static int put_std(Buf *b, PyObject *item) {
    if (PyDict_GET_SIZE(item) != 8)
        return 1;
    PyObject *v[8];
    Py_ssize_t pos = 0;
    PyObject *k, *val;
    for (int i = 0; i < 8; i++) {
        if (!PyDict_Next(item, &pos, &k, &val) || !key_is(k, STD_KEYS[i]))
            return 1;
        v[i] = val;
    }
    /* type, dtype: exact str; shape: list of ints; statistics: float or int; requires_grad: bool or None */
    if (!PyUnicode_CheckExact(v[0]) || !PyUnicode_CheckExact(v[1]) || !shape_ok(v[2]))
        return 1;
    for (int i = 3; i < 7; i++)
        if (!PyFloat_CheckExact(v[i]) && !PyLong_CheckExact(v[i]))
            return 1;
    if (grad_text(v[7]) == NULL)
        return 1;
    /* no Python code runs in there: the borrowed values stay alive */
    return put_std_fields(b, v);
}

/* The text of a standard item's eight values (checked by the caller), items._STD_FLOATS / _STD_TEMPLATE. */
static int put_std_fields(Buf *b, PyObject *const *v) {
    const char *grad = grad_text(v[7]);
    static const char *const LABELS[4] = {"\", \"Max\": \"", "\", \"Min\": \"", "\", \"Mean\": \"",
                                          "\", \"Norm\": \""};
    if (PUT_LIT(b, "\"type\": \"") < 0 || put_escaped(b, v[0]) < 0 || PUT_LIT(b, "\", \"dtype\": \"") < 0 ||
        put_escaped(b, v[1]) < 0 || PUT_LIT(b, "\", \"shape\": \"") < 0 || put_shape(b, v[2]) < 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        if (put(b, LABELS[i], (Py_ssize_t)strlen(LABELS[i])) < 0 || put_stat(b, v[3 + i]) < 0)
            return -1;
    }
    if (PUT_LIT(b, "\", \"requires_grad\": \"") < 0 || put(b, grad, (Py_ssize_t)strlen(grad)) < 0)
        return -1;
    return PUT_LIT(b, "\", \"data_name\": \"-1\"");
}

/* items.item_text of a plain scalar item {"type": str, "value": int | float | bool} without md5: as put_std. */
static int put_scalar(Buf *b, PyObject *item) {
    if (PyDict_GET_SIZE(item) != 2)
        return 1;
    PyObject *type = PyDict_GetItemWithError(item, s_type);
    if (type == NULL)
        return PyErr_Occurred() ? -1 : 1;
    PyObject *value = PyDict_GetItemWithError(item, s_value);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (!PyUnicode_CheckExact(type))
        return 1;
    char text[64];
    const char *tname;
    Py_ssize_t tlen;
    PyObject *big = NULL;
    if (value == Py_True || value == Py_False) {
        tname = "bool";
        tlen = snprintf(text, sizeof text, "%s", value == Py_True ? "True" : "False");
    } else if (PyFloat_CheckExact(value)) {
        tname = "float";
        char *s = PyOS_double_to_string(PyFloat_AS_DOUBLE(value), 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (s == NULL)
            return -1;
        tlen = (Py_ssize_t)strlen(s);
        if (tlen >= (Py_ssize_t)sizeof text) {  /* cannot happen: a repr is at most 24 characters */
            PyMem_Free(s);
            return 1;
        }
        memcpy(text, s, (size_t)tlen + 1);
        PyMem_Free(s);
    } else if (PyLong_CheckExact(value)) {
        tname = "int";
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (overflow) {
            big = PyObject_Repr(value);  /* may raise, as int.__repr__ does past the digit limit */
            if (big == NULL)
                return -1;
            if (!PyUnicode_IS_ASCII(big)) {
                Py_DECREF(big);
                return 1;
            }
        } else {
            tlen = snprintf(text, sizeof text, "%lld", x);
        }
    } else {
        return 1;
    }
    const char *t = big ? (const char *)PyUnicode_1BYTE_DATA(big) : text;
    if (big)
        tlen = PyUnicode_GET_LENGTH(big);
    int rc = -1;
    if (PUT_LIT(b, "\"type\": \"") < 0 || put_escaped(b, type) < 0 || PUT_LIT(b, "\", \"value\": \"") < 0 ||
        put(b, t, tlen) < 0 || PUT_LIT(b, "\", \"data_name\": \"-1\", \"requires_grad\": \"null\", \"Max\": \"") < 0 ||
        put(b, t, tlen) < 0 || PUT_LIT(b, "\", \"Min\": \"") < 0 || put(b, t, tlen) < 0 ||
        PUT_LIT(b, "\", \"Mean\": \"") < 0 || put(b, t, tlen) < 0 || PUT_LIT(b, "\", \"Norm\": \"") < 0 ||
        put(b, t, tlen) < 0 || PUT_LIT(b, "\", \"dtype\": \"<class ") < 0 ||
        put(b, tname, (Py_ssize_t)strlen(tname)) < 0 || PUT_LIT(b, ">\", \"shape\": \"[]\"") < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(big);
    return rc;
}

/* One item's member text (without braces): 0 written, 1 hand the entry back (a non-ASCII text from the
   fallback), -1 error. */
static int put_item(Buf *b, PyObject *item, PyObject *with_md5, PyObject *fallback) {
    if (item == Py_None)
        return PUT_LIT(b, "\"value\": \"null\"");
    Py_ssize_t mark = b->n;
    int rc = put_std(b, item);
    if (rc == 1) {
        b->n = mark;
        rc = with_md5 == Py_True ? 1 : put_scalar(b, item);
    }
    if (rc != 1)
        return rc;
    b->n = mark;
    PyObject *text = PyObject_CallFunctionObjArgs(fallback, item, with_md5, NULL);
    if (text == NULL)
        return -1;
    if (!PyUnicode_Check(text)) {
        Py_DECREF(text);
        PyErr_SetString(PyExc_TypeError, "item_text must return str");
        return -1;
    }
    rc = PyUnicode_IS_ASCII(text) ? put_ascii(b, text) : 1;
    Py_DECREF(text);
    return rc;
}

/* ------------------------------------------------------------------------------------------- entries */

/* A plain argument: None or an exact dict with a "type" key (fast_path._plain); -1 error. */
static int plain_item(PyObject *item) {
    if (item == Py_None)
        return 1;
    if (!PyDict_CheckExact(item))
        return 0;
    return PyDict_Contains(item, s_type);
}

/* Every argument item of an entry in fast_path._pairs's order (positional inputs, keyword inputs, parameters,
   then the outputs), each handed to `visit(ctx, group, key, index, item)`: group 0 inputs, 1 parameters,
   2 outputs; `key` a keyword or parameter name, or NULL for the list position `index`. A visit returns 1 to go
   on, 0 to stop (not the plain layout) or -1 (error); the walk returns 1 when every item was visited, or the
   first 0 / -1. An argument that is a list where a dict belongs, or a dict / other list where the output list
   belongs, is not the plain layout (0), nor is a container of another type (`"output": 7`), which the general
   path refuses with a message (the walk skipped it: the node read as having no outputs, and compared as a pass).
   No Python code runs: exact types only. */
typedef int (*LayoutVisit)(void *ctx, int group, PyObject *key, Py_ssize_t index, PyObject *item);

static int walk_list(PyObject *v, int group, LayoutVisit visit, void *ctx) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        int ok = visit(ctx, group, NULL, i, PyList_GET_ITEM(v, i));
        if (ok <= 0)
            return ok;
    }
    return 1;
}

static int walk_layout(PyObject *entry, LayoutVisit visit, void *ctx) {
    PyObject *lists[2] = {s_input_args, s_input};
    for (int j = 0; j < 2; j++) {
        PyObject *v = PyDict_GetItemWithError(entry, lists[j]);
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        if (PyList_CheckExact(v)) {
            int ok = walk_list(v, 0, visit, ctx);
            if (ok <= 0)
                return ok;
        } else if (v != Py_None) {
            return 0;
        }
    }
    PyObject *dicts[2] = {s_input_kwargs, s_parameters};
    for (int j = 0; j < 2; j++) {
        PyObject *v = PyDict_GetItemWithError(entry, dicts[j]);
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        if (v == Py_None)
            continue;
        if (!PyDict_CheckExact(v))
            return 0;
        Py_ssize_t pos = 0;
        PyObject *k, *item;
        while (PyDict_Next(v, &pos, &k, &item)) {
            int ok = visit(ctx, j, k, 0, item);
            if (ok <= 0)
                return ok;
        }
    }
    PyObject *v = PyDict_GetItemWithError(entry, s_output);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 1;
    if (PyList_CheckExact(v))
        return walk_list(v, 2, visit, ctx);
    return v == Py_None;
}

static int visit_plain(void *ctx, int group, PyObject *key, Py_ssize_t index, PyObject *item) {
    (void)ctx, (void)group, (void)key, (void)index;
    return plain_item(item);
}

/* The entry's layout check (fast_path._pairs): 1 plain, 0 not (the general path), -1 error. */
static int plain_layout(PyObject *entry) {
    return walk_layout(entry, visit_plain, NULL);
}

/* Closes the two texts and returns them as (input_data, output_data); NULL with an exception. */
static PyObject *side_texts(Buf *ib, int in_count, Buf *ob, int out_count) {
    if ((in_count ? PUT_LIT(ib, "}") : PUT_LIT(ib, "{}")) < 0 ||
        (out_count ? PUT_LIT(ob, "}") : PUT_LIT(ob, "{}")) < 0)
        return NULL;
    PyObject *ins = buf_str(ib);
    PyObject *outs = ins ? buf_str(ob) : NULL;
    PyObject *result = outs ? PyTuple_Pack(2, ins, outs) : NULL;
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    return result;
}

typedef struct {
    Buf *b;
    const char *name;       /* the node name, escaped */
    Py_ssize_t name_len;
    int count;              /* members written so far */
    PyObject *with_md5, *fallback;
} Side;

/* One member: "name.<group><key>": {item}; 1 hands the entry back, -1 error. */
static int put_member(Side *s, const char *group, PyObject *key_str, Py_ssize_t index, PyObject *item) {
    Buf *b = s->b;
    if (put(b, s->count ? ", \"" : "{\"", s->count ? 3 : 2) < 0 || put(b, s->name, s->name_len) < 0 ||
        put(b, group, (Py_ssize_t)strlen(group)) < 0)
        return -1;
    if (key_str != NULL) {
        if (put_escaped(b, key_str) < 0)
            return -1;
    } else {
        char tmp[32];
        if (put(b, tmp, snprintf(tmp, sizeof tmp, "%zd", index)) < 0)
            return -1;
    }
    if (PUT_LIT(b, "\": {") < 0)
        return -1;
    Py_INCREF(item);  /* the fallback runs Python code: keep the item alive whatever it does */
    int rc = put_item(b, item, s->with_md5, s->fallback);
    Py_DECREF(item);
    if (rc != 0)
        return rc;
    s->count++;
    return PUT_LIT(b, "}");
}

static int put_list(Side *s, const char *group, PyObject *entry, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(entry, key);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyList_CheckExact(v))
        return 0;
    Py_INCREF(v);
    int rc = 0;
    /* the size is read each time: the fallback cannot make us read past the list's end */
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(v); i++) {
        PyObject *item = PyList_GET_ITEM(v, i);
        rc = plain_item(item) == 1 ? put_member(s, group, NULL, i, item) : 1;
    }
    Py_DECREF(v);
    return rc;
}

static int put_dict(Side *s, const char *group, PyObject *entry, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(entry, key);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyDict_CheckExact(v))
        return 0;
    Py_INCREF(v);
    /* a snapshot of the items: the fallback runs Python code, and a dict must not change while it is walked */
    PyObject *items = PyDict_Items(v);
    Py_DECREF(v);
    if (items == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(items); i++) {
        PyObject *pair = PyList_GET_ITEM(items, i);
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *item = PyTuple_GET_ITEM(pair, 1);
        if (plain_item(item) != 1) {
            rc = 1;
            break;
        }
        /* a str key's own characters, as the general path's concatenation takes them; other keys: its business */
        if (!PyUnicode_Check(k)) {
            rc = 1;
            break;
        }
        rc = put_member(s, group, k, 0, item);
    }
    Py_DECREF(items);
    return rc;
}

/* entry_texts(item_text, name, entry, with_md5) -> (input text, output text), or None for the general path (a
   nested argument, a parameters_grad entry, anything not an exact dict / list / str where one is expected).
   Items it does not format itself go to the Python `item_text(item, with_md5)`; an item text that is not ASCII
   hands the whole entry back, so the output buffer only ever holds ASCII. */
static PyObject *entry_texts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "entry_texts(item_text, name, entry, with_md5)");
        return NULL;
    }
    PyObject *fallback = args[0], *name = args[1], *entry = args[2];
    PyObject *with_md5 = PyObject_IsTrue(args[3]) ? Py_True : Py_False;
    if (PyErr_Occurred())
        return NULL;
    if (!PyUnicode_CheckExact(name) || !PyDict_CheckExact(entry))
        Py_RETURN_NONE;
    int has = PyUnicode_Contains(name, s_parameters_grad);
    if (has < 0)
        return NULL;
    if (has)
        Py_RETURN_NONE;
    int ok = plain_layout(entry);
    if (ok < 0)
        return NULL;
    if (!ok)
        Py_RETURN_NONE;

    char name_stack[256], in_stack[4096], out_stack[2048];
    Buf nb = {name_stack, 0, sizeof name_stack, 0};
    Buf ib = {in_stack, 0, sizeof in_stack, 0};
    Buf ob = {out_stack, 0, sizeof out_stack, 0};
    PyObject *result = NULL;
    Py_INCREF(entry);
    if (put_escaped(&nb, name) < 0)
        goto done;
    Side in = {&ib, nb.p, nb.n, 0, with_md5, fallback};
    Side out = {&ob, nb.p, nb.n, 0, with_md5, fallback};
    /* fast_path._pairs's order: positional inputs, keyword inputs, parameters; then the outputs */
    int rc = put_list(&in, ".input.", entry, s_input_args);
    if (rc == 0)
        rc = put_list(&in, ".input.", entry, s_input);
    if (rc == 0)
        rc = put_dict(&in, ".input.", entry, s_input_kwargs);
    if (rc == 0)
        rc = put_dict(&in, ".parameters.", entry, s_parameters);
    if (rc == 0)
        rc = put_list(&out, ".output.", entry, s_output);
    if (rc < 0)
        goto done;
    if (rc == 1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = side_texts(&ib, in.count, &ob, out.count);
done:
    Py_DECREF(entry);
    buf_free(&nb);
    buf_free(&ib);
    buf_free(&ob);
    return result;
}
