/* Statistics compare, one item pair at a time: the pairs of an entry and the compare slot of a pair.
   Part of _rowtext.c, which includes it once (a unity build: the module is one translation unit). */

/* ------------------------------------------------------------------------------ statistics compare */
/* compare_plain(debug_name, de, bench_name, be, exempt, placeholder, msgs, bench_texts, item_text): what
   fast_path.compare_stats returns, (precision, input text, output text, worst output NormRelativeErr, inputs
   ok, bench texts or None), for two entries of the plain layout whose compared items are standard statistics
   items with float statistics (shapes lists of ints, requires_grad True / False / None) or plain scalars
   (bool, float, or an int below 2^52, so the int arithmetic is exact); None for anything else (compare_stats
   then takes it in Python). `msgs` are compare.py's _FAST_MSGS, so both say the same words. */

#define MAX_PAIRS 64
enum { LEVEL_PASS = 0, LEVEL_WARNING = 1, LEVEL_ERROR = 2 };
static const char *const GROUP_TEXT[3] = {"input.", "parameters.", "output."};
static const char *const LEVEL_TEXT[3] = {"pass", "warning", "error"};

typedef struct {
    int group;          /* index into GROUP_TEXT */
    PyObject *key;      /* a str key, or NULL: a list index */
    Py_ssize_t index;
    PyObject *item;     /* None or an exact dict with "type" (borrowed: the entry is the caller's) */
} Pair;

typedef struct {
    Pair p[MAX_PAIRS];
    int n, n_in;
} Pairs;

/* A LayoutVisit: the pair is kept when its item is plain (and a keyword is a str); n_in counts the inputs. */
static int add_pair(void *ctx, int group, PyObject *key, Py_ssize_t index, PyObject *item) {
    Pairs *ps = ctx;
    int ok = plain_item(item);
    if (ok <= 0)
        return ok;
    if (ps->n == MAX_PAIRS || (key != NULL && !PyUnicode_Check(key)))
        return 0;
    Pair *p = &ps->p[ps->n++];
    p->group = group;
    p->key = key;
    p->index = index;
    p->item = item;
    if (group != 2)
        ps->n_in = ps->n;
    return 1;
}

/* fast_path._pairs: 1 collected, 0 not the plain layout, -1 error. No Python code runs (exact types only). */
static int collect_pairs(PyObject *entry, Pairs *ps) {
    ps->n = ps->n_in = 0;
    return walk_layout(entry, add_pair, ps);
}

/* The same key suffix ("input.0" from a list and from a keyword named "0" are the same, as in a dict) */
static int same_suffix(const Pair *a, const Pair *b) {
    if (a->group != b->group)
        return 0;
    if (a->key == NULL && b->key == NULL)
        return a->index == b->index;
    if (a->key != NULL && b->key != NULL)
        return PyUnicode_Compare(a->key, b->key) == 0;
    const Pair *k = a->key != NULL ? a : b, *i = a->key != NULL ? b : a;
    char digits[32];
    snprintf(digits, sizeof digits, "%zd", i->index);
    return PyUnicode_CompareWithASCIIString(k->key, digits) == 0;
}

/* b_map.get(suffix): the last bench pair with that suffix (outputs after inputs, as dict.update leaves it) */
static const Pair *bench_pair(const Pairs *bench, const Pair *d) {
    for (int i = bench->n - 1; i >= 0; i--)
        if (same_suffix(&bench->p[i], d))
            return &bench->p[i];
    return NULL;
}

/* items.is_std_item with exact str keys; fills v with its eight values */
static int std_values(PyObject *item, PyObject **v) {
    if (!PyDict_CheckExact(item) || PyDict_GET_SIZE(item) != 8)
        return 0;
    Py_ssize_t pos = 0;
    PyObject *k;
    for (int i = 0; i < 8; i++)
        if (!PyDict_Next(item, &pos, &k, &v[i]) || !key_is(k, STD_KEYS[i]))
            return 0;
    return PyUnicode_CheckExact(v[0]) && PyUnicode_CheckExact(v[1]);
}

typedef struct {
    Py_ssize_t start, end;   /* the member text so far ("key": {fields and diffs) in the shared buffer */
    int is_output, is_null, level, n_msgs, has_nre, grad_ok, in_params;
    double nre;
    PyObject *msgs[8];
} Slot;

static void flag(Slot *s, int level, PyObject *msg) {
    if (level > s->level)
        s->level = level;
    for (int i = 0; i < s->n_msgs; i++)
        if (s->msgs[i] == msg || PyUnicode_Compare(s->msgs[i], msg) == 0)
            return;
    if (s->n_msgs < 8)
        s->msgs[s->n_msgs++] = msg;
}

static int same_int_list(PyObject *a, PyObject *b) {
    if (PyList_GET_SIZE(a) != PyList_GET_SIZE(b))
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(a); i++) {
        int eq = PyObject_RichCompareBool(PyList_GET_ITEM(a, i), PyList_GET_ITEM(b, i), Py_EQ);
        if (eq <= 0)
            return eq;
    }
    return 1;
}

static const char *const DIFF_LABELS[4] = {", \"Max diff\": \"", "\", \"Min diff\": \"", "\", \"Mean diff\": \"",
                                           "\", \"L2norm diff\": \""};
static const char *const REL_LABELS[4] = {"\", \"MaxRelativeErr\": \"", "\", \"MinRelativeErr\": \"",
                                          "\", \"MeanRelativeErr\": \"", "\", \"NormRelativeErr\": \""};

/* Two standard items with float statistics: the slot's text and checks (fast_path's float branch). */
/* dtypes.float_dtype: the text after the last ".", ASCII only, lower-cased, starts with "float" or "bfloat" or is
   "half" or "double" (a real floating-point dtype: "torch.bfloat16", "Float16"). */
static int float_dtype(PyObject *text) {
    if (!PyUnicode_IS_ASCII(text))
        return 0;
    const char *p = (const char *)PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), start = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] == '.')
            start = i + 1;
    char tail[8];
    Py_ssize_t len = n - start, k = len < 7 ? len : 7;
    for (Py_ssize_t i = 0; i < k; i++)
        tail[i] = (char)(p[start + i] >= 'A' && p[start + i] <= 'Z' ? p[start + i] + 32 : p[start + i]);
    tail[k] = 0;
    return strncmp(tail, "float", 5) == 0 || strncmp(tail, "bfloat", 6) == 0 ||
           (len == 4 && strcmp(tail, "half") == 0) || (len == 6 && strcmp(tail, "double") == 0);
}

static int std_slot(Buf *b, Slot *s, PyObject *const *v, PyObject *const *w, int exempt, PyObject *msgs) {
    if (!shape_ok(v[2]) || !shape_ok(w[2]) || grad_text(v[7]) == NULL || grad_text(w[7]) == NULL)
        return 1;
    double x[4], y[4];
    for (int i = 0; i < 4; i++) {
        if (!PyFloat_CheckExact(v[3 + i]) || !PyFloat_CheckExact(w[3 + i]))
            return 1;
        y[i] = PyFloat_AS_DOUBLE(w[3 + i]);
        x[i] = PyFloat_AS_DOUBLE(v[3 + i]) - y[i];
    }
    if (put_std_fields(b, v) < 0)
        return -1;
    for (int i = 0; i < 4; i++)
        if (put(b, DIFF_LABELS[i], (Py_ssize_t)strlen(DIFF_LABELS[i])) < 0 || put_float(b, x[i]) < 0)
            return -1;
    for (int i = 0; i < 4; i++)
        if (put(b, REL_LABELS[i], (Py_ssize_t)strlen(REL_LABELS[i])) < 0 || put_rel(b, x[i], y[i]) < 0)
            return -1;
    if (PUT_LIT(b, "\"") < 0)
        return -1;
    if (y[3] != 0) {
        s->has_nre = 1;
        s->nre = x[3] == 0 ? 0.0 : fabs(x[3] / y[3]);
    }
    s->grad_ok = v[7] == w[7];   /* True / False / None: the same object when equal */
    if (!exempt) {
        if (PyUnicode_Compare(v[1], w[1]) != 0) {
            /* two floating-point dtypes: the note (msgs[7]; None with strict_dtype), else the error */
            PyObject *note = PyTuple_GET_ITEM(msgs, 7);
            if (note != Py_None && float_dtype(v[1]) && float_dtype(w[1]))
                flag(s, LEVEL_PASS, note);
            else
                flag(s, LEVEL_ERROR, PyTuple_GET_ITEM(msgs, 0));
        }
        int same = same_int_list(v[2], w[2]);
        if (same < 0)
            return -1;
        if (!same)
            flag(s, LEVEL_ERROR, PyTuple_GET_ITEM(msgs, 1));
        if (!s->grad_ok)
            flag(s, LEVEL_ERROR, PyTuple_GET_ITEM(msgs, 2));
        /* debug Max/Min inf or nan while the bench's is finite */
        double dmax = PyFloat_AS_DOUBLE(v[3]), dmin = PyFloat_AS_DOUBLE(v[4]);
        if ((!isfinite(dmax) && isfinite(y[0])) || (!isfinite(dmin) && isfinite(y[1])))
            flag(s, LEVEL_ERROR, PyTuple_GET_ITEM(msgs, 3));
    }
    return 0;
}

/* fast_path._is_scalar, narrowed: a bool, a float or an int of magnitude below 2^52. 1 yes (value in *v),
   0 not such a scalar, -1 error. */
static int scalar_value(PyObject *item, PyObject **v) {
    if (!PyDict_CheckExact(item) || PyDict_GET_SIZE(item) != 2)
        return 0;
    PyObject *type = PyDict_GetItemWithError(item, s_type);
    if (type == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *value = PyDict_GetItemWithError(item, s_value);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_CheckExact(type))
        return 0;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (overflow || x >= (1LL << 52) || x <= -(1LL << 52))
            return 0;
    } else if (!PyFloat_CheckExact(value) && !PyBool_Check(value)) {
        return 0;
    }
    *v = value;
    return 1;
}

/* Two plain scalars: metrics._stat of the two values in all four statistics, and the value check. */
static int scalar_slot(Buf *b, Slot *s, PyObject *d, PyObject *dv, PyObject *bv, int exempt, PyObject *msgs) {
    int rc = put_scalar(b, d);
    if (rc != 0)
        return rc;
    char diff[48], rel[48];
    Buf db = {diff, 0, sizeof diff, 0}, rb = {rel, 0, sizeof rel, 0};
    int d_int = PyLong_CheckExact(dv), b_int = PyLong_CheckExact(bv);
    if ((d_int || PyFloat_CheckExact(dv)) && (b_int || PyFloat_CheckExact(bv))) {
        double y;
        int zero_diff;
        if (d_int && b_int) {
            long long a = PyLong_AsLongLong(dv), c = PyLong_AsLongLong(bv), x = a - c;   /* below 2^53: exact */
            char t[32];
            rc = put(&db, t, snprintf(t, sizeof t, "%lld", x));
            y = (double)c;
            zero_diff = x == 0;
            if (!zero_diff && y != 0) {
                s->nre = fabs((double)x / y);
                rc = rc < 0 ? rc : put_rel(&rb, (double)x, y);
            }
        } else {
            double a = d_int ? (double)PyLong_AsLongLong(dv) : PyFloat_AS_DOUBLE(dv);
            y = b_int ? (double)PyLong_AsLongLong(bv) : PyFloat_AS_DOUBLE(bv);
            double x = a - y;
            rc = put_float(&db, x);
            zero_diff = x == 0;
            if (!zero_diff && y != 0) {
                s->nre = fabs(x / y);
                rc = rc < 0 ? rc : put_rel(&rb, x, y);
            }
        }
        if (y == 0) {
            rc = rc < 0 ? rc : PUT_LIT(&rb, "N/A");
        } else {
            s->has_nre = 1;
            if (zero_diff) {
                s->nre = 0.0;
                rc = rc < 0 ? rc : PUT_LIT(&rb, "0.0%");
            }
        }
    } else {
        rc = PUT_LIT(&db, "N/A") < 0 || PUT_LIT(&rb, "N/A") < 0 ? -1 : 0;
    }
    for (int i = 0; rc == 0 && i < 4; i++)
        if (put(b, DIFF_LABELS[i], (Py_ssize_t)strlen(DIFF_LABELS[i])) < 0 || put(b, db.p, db.n) < 0)
            rc = -1;
    for (int i = 0; rc == 0 && i < 4; i++)
        if (put(b, REL_LABELS[i], (Py_ssize_t)strlen(REL_LABELS[i])) < 0 || put(b, rb.p, rb.n) < 0)
            rc = -1;
    if (rc == 0 && PUT_LIT(b, "\"") < 0)
        rc = -1;
    buf_free(&db);
    buf_free(&rb);
    if (rc != 0)
        return rc;
    s->grad_ok = 1;
    /* a different value of the same type (two NaNs are the same value here) */
    if (!exempt && Py_TYPE(dv) == Py_TYPE(bv)) {
        int differ;
        if (PyFloat_CheckExact(dv)) {
            double a = PyFloat_AS_DOUBLE(dv), c = PyFloat_AS_DOUBLE(bv);
            differ = a != c && !(a != a && c != c);
        } else if (PyLong_CheckExact(dv)) {
            differ = PyLong_AsLongLong(dv) != PyLong_AsLongLong(bv);
        } else {
            differ = dv != bv;
        }
        if (differ)
            flag(s, LEVEL_ERROR, PyTuple_GET_ITEM(msgs, 4));
    }
    return 0;
}


/* float_slot(key, is_output, d, b): the compare slot of two standard statistics items whose statistics are all
   floats, as fast_path uses it: [key, is_output, base text, diffs text, NormRelativeErr, requires_grad
   consistent, "pass", None, not all Max/Min diffs finite]; None when an item is not such an item (a shape
   that is not a list of ints, a requires_grad other than True/False/None, a non-float statistic). */
static PyObject *float_slot(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "float_slot(key, is_output, debug_item, bench_item)");
        return NULL;
    }
    PyObject *key = args[0], *is_output = args[1], *d = args[2], *bi = args[3];
    if (!PyDict_CheckExact(d) || !PyDict_CheckExact(bi))
        Py_RETURN_NONE;
    PyObject *const dkeys[8] = {s_type, s_dtype, s_shape, s_Max, s_Min, s_Mean, s_Norm, s_requires_grad};
    PyObject *const bkeys[5] = {s_Max, s_Min, s_Mean, s_Norm, s_requires_grad};
    PyObject *dv[8] = {NULL}, *bv[5] = {NULL};
    PyObject *result = NULL;
    char base_stack[512], diff_stack[512];
    Buf base = {base_stack, 0, sizeof base_stack, 0}, diffs = {diff_stack, 0, sizeof diff_stack, 0};
    /* own references: the requires_grad comparison below may run Python code */
    for (int i = 0; i < 8; i++) {
        PyObject *v = PyDict_GetItemWithError(d, dkeys[i]);
        if (v == NULL)
            goto none_or_error;
        dv[i] = Py_NewRef(v);
    }
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyDict_GetItemWithError(bi, bkeys[i]);
        if (v == NULL)
            goto none_or_error;
        bv[i] = Py_NewRef(v);
    }
    if (!PyUnicode_CheckExact(dv[0]) || !PyUnicode_CheckExact(dv[1]) || !shape_ok(dv[2]) ||
        grad_text(dv[7]) == NULL)
        goto none;
    double x[4], y[4];
    for (int i = 0; i < 4; i++) {
        if (!PyFloat_CheckExact(dv[3 + i]) || !PyFloat_CheckExact(bv[i]))
            goto none;
        y[i] = PyFloat_AS_DOUBLE(bv[i]);
        x[i] = PyFloat_AS_DOUBLE(dv[3 + i]) - y[i];
    }
    int same_grad = PyObject_RichCompareBool(dv[7], bv[4], Py_EQ);
    if (same_grad < 0)
        goto done;
    if (put_std_fields(&base, dv) < 0)
        goto done;
    static const char *const DIFF_LABELS[4] = {", \"Max diff\": \"", "\", \"Min diff\": \"",
                                               "\", \"Mean diff\": \"", "\", \"L2norm diff\": \""};
    static const char *const REL_LABELS[4] = {"\", \"MaxRelativeErr\": \"", "\", \"MinRelativeErr\": \"",
                                              "\", \"MeanRelativeErr\": \"", "\", \"NormRelativeErr\": \""};
    for (int i = 0; i < 4; i++)
        if (put(&diffs, DIFF_LABELS[i], (Py_ssize_t)strlen(DIFF_LABELS[i])) < 0 || put_float(&diffs, x[i]) < 0)
            goto done;
    for (int i = 0; i < 4; i++)
        if (put(&diffs, REL_LABELS[i], (Py_ssize_t)strlen(REL_LABELS[i])) < 0 || put_rel(&diffs, x[i], y[i]) < 0)
            goto done;
    if (PUT_LIT(&diffs, "\"") < 0)
        goto done;
    PyObject *nre = y[3] == 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(x[3] == 0 ? 0.0 : fabs(x[3] / y[3]));
    if (nre == NULL)
        goto done;
    PyObject *base_s = buf_str(&base), *diffs_s = base_s ? buf_str(&diffs) : NULL;
    /* x - x is 0 only for a finite x */
    PyObject *odd = (x[0] - x[0] == 0 && x[1] - x[1] == 0) ? Py_False : Py_True;
    if (diffs_s != NULL)
        result = PyList_New(9);
    if (result == NULL) {
        Py_XDECREF(base_s);
        Py_XDECREF(diffs_s);
        Py_DECREF(nre);
        goto done;
    }
    PyList_SET_ITEM(result, 0, Py_NewRef(key));
    PyList_SET_ITEM(result, 1, Py_NewRef(is_output));
    PyList_SET_ITEM(result, 2, base_s);
    PyList_SET_ITEM(result, 3, diffs_s);
    PyList_SET_ITEM(result, 4, nre);
    PyList_SET_ITEM(result, 5, Py_NewRef(same_grad ? s_True : s_False));
    PyList_SET_ITEM(result, 6, Py_NewRef(s_pass));
    PyList_SET_ITEM(result, 7, Py_NewRef(Py_None));
    PyList_SET_ITEM(result, 8, Py_NewRef(odd));
    goto done;
none_or_error:
    if (PyErr_Occurred())
        goto done;
none:
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < 8; i++)
        Py_XDECREF(dv[i]);
    for (int i = 0; i < 5; i++)
        Py_XDECREF(bv[i]);
    buf_free(&base);
    buf_free(&diffs);
    return result;
}
