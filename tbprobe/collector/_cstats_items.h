/* HostItems: a whole dump.json tensor item for the common small tensor, in one call (part of _cstats.c).

   The collector builds an item per tensor it sees: about 160 per step at L0 on a small model, 400 at mix. In
   Python that is a dozen attribute reads and calls on the tensor, a dict and the statistics call, about 4 us per
   tensor, which is most of the collector's own cost on a model whose kernels are cheap. Here the same work is one
   C call of about a microsecond. It takes only the plain case: an exact torch.Tensor or Parameter, strided, on the
   CPU, contiguous, not a negated view, of a dtype the pass reads, with 1 <= numel < cache_min and at least one
   dimension. For anything else it returns None and the Python path (tbprobe/collector/pytorch/values.py) does
   what it always did, so the items are the same dicts, key for key and in the same order. With _cgrad built, the
   collector reads the tensor's facts in C++ and calls item_from_facts below instead of `item`.

   The "md5" summary (what the reference calls md5 is a CRC-32 of the raw bytes, written %08x) is taken here too:
   zlib.crc32's result, by carry-less multiplication where the CPU has it (about 11 GB/s here against zlib's 3)
   and by the usual table-driven CRC-32 (polynomial 0xEDB88320, eight bytes per step) for the rest. */

static uint32_t crc_table[8][256];
static int crc_clmul_ok;   /* the CPU has PCLMULQDQ and SSE4.1 (set at import; x86 only) */

static void crc_init(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    crc_clmul_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CRC_CLMUL 1
/* CRC-32 by carry-less multiplication (PCLMULQDQ), four 128-bit lanes folded 64 bytes at a time, then folded to one
   lane and reduced (Barrett) to 32 bits: the method of Intel's "Fast CRC Computation for Generic Polynomials Using
   PCLMULQDQ", with the constants of the bit-reflected CRC-32 polynomial that zlib and Linux use. Takes and returns
   the running register (not inverted); n is a multiple of 16, at least 64. About 8x the table's speed here. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(const unsigned char *buf, size_t n, uint32_t crc) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    n -= 64;
    while (n >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        n -= 64;
    }
    /* four lanes into one */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        n -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_bytes(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
#ifdef CRC_CLMUL
    if (crc_clmul_ok && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        c = crc32_clmul(p, chunk, c);
        p += chunk;
        n -= chunk;
    }
#endif
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;   /* little-endian words, as the x86 and Arm hosts torch runs on */
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static const int kind_size[6] = {4, 2, 2, 8, 4, 1};

typedef struct {
    PyObject_HEAD
    PyObject *tensor_type, *param_type;  /* the exact types taken */
    PyObject *strided;                   /* torch.strided */
    PyObject *kinds;                     /* dtype -> kind code (dict) */
    PyObject *names;                     /* dtype -> "torch.float32" (dict) */
    Py_ssize_t cache_min;                /* larger tensors go to the Python path (it remembers them) */
    int checksum;                        /* add "md5" */
    /* health of the items made here or noted (`note`), for the step's summary (reset by the caller each step) */
    double max_abs;
    Py_ssize_t nonfinite;                /* items whose Max or Min is NaN/Inf */
    int nonfinite_values;                /* any statistic NaN/Inf: the writer needs the json module */
} HostItems;

static PyObject *s_layout, *s_is_cpu, *s_dtype, *s_shape, *s_requires_grad, *s_is_contiguous, *s_data_ptr;
static PyObject *s_type, *s_md5, *v_torch_tensor, *s_is_neg;   /* (the attribute names double as item keys) */

static int intern_all(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_layout, "layout"}, {&s_is_cpu, "is_cpu"}, {&s_dtype, "dtype"}, {&s_shape, "shape"},
        {&s_requires_grad, "requires_grad"}, {&s_is_contiguous, "is_contiguous"}, {&s_data_ptr, "data_ptr"},
        {&s_type, "type"}, {&s_md5, "md5"}, {&v_torch_tensor, "torch.Tensor"}, {&s_is_neg, "is_neg"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].text);
        if (*names[i].slot == NULL)
            return -1;
    }
    return 0;
}

static int HostItems_init(HostItems *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tensor_type", "param_type", "strided", "kinds", "names", "cache_min", "checksum", NULL};
    PyObject *tt, *pt, *st, *kinds, *names;
    Py_ssize_t cache_min;
    int checksum = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!O!n|p", kwlist, &tt, &pt, &st, &PyDict_Type, &kinds,
                                     &PyDict_Type, &names, &cache_min, &checksum))
        return -1;
    if (!PyType_Check(tt) || !PyType_Check(pt)) {
        PyErr_SetString(PyExc_TypeError, "HostItems: tensor_type and param_type must be types");
        return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kinds, &pos, &key, &value)) {
        long k = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
        PyObject *name = PyDict_GetItemWithError(names, key);   /* borrowed */
        if (k < KIND_F32 || k > KIND_BOOL || name == NULL || !PyUnicode_Check(name)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "HostItems: every kind needs a code 0..5 and a dtype name");
            return -1;
        }
    }
    if (cache_min < 1) {
        PyErr_SetString(PyExc_ValueError, "HostItems: cache_min must be positive");
        return -1;
    }
    Py_INCREF(tt); Py_XSETREF(self->tensor_type, tt);
    Py_INCREF(pt); Py_XSETREF(self->param_type, pt);
    Py_INCREF(st); Py_XSETREF(self->strided, st);
    Py_INCREF(kinds); Py_XSETREF(self->kinds, kinds);
    Py_INCREF(names); Py_XSETREF(self->names, names);
    self->cache_min = cache_min;
    self->checksum = checksum;
    self->max_abs = 0.0;
    self->nonfinite = 0;
    self->nonfinite_values = 0;
    return 0;
}

static void HostItems_dealloc(HostItems *self) {
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->param_type);
    Py_XDECREF(self->strided);
    Py_XDECREF(self->kinds);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An attribute that must be exactly `expected` (a borrowed singleton); 1 yes, 0 no (errors cleared: the Python
   path then meets them itself). */
static int attr_is(PyObject *t, PyObject *name, PyObject *expected) {
    PyObject *v = PyObject_GetAttr(t, name);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = v == expected;
    Py_DECREF(v);
    return same;
}

static int set_new(PyObject *d, PyObject *key, PyObject *value) {
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* Adds one item's health figure (see health_of) to the step's. */
static void note_health(HostItems *self, double h) {
    if (h >= 0.0) {
        if (h > self->max_abs)
            self->max_abs = h;
    } else {
        self->nonfinite_values = 1;
        if (h == -1.0)
            self->nonfinite++;
        else if (-2.0 - h > self->max_abs)   /* finite values, their Mean or Norm overflowed */
            self->max_abs = -2.0 - h;
    }
}

/* The item of n values of `kind` at p, with its dtype name, shape list (a new reference, taken; NULL: an error
   already set) and requires_grad; its health is added to the step's. NULL with an exception on failure. */
static PyObject *build_item(HostItems *self, int kind, PyObject *name, PyObject *shape_list, const void *p,
                            Py_ssize_t numel, PyObject *rg, double *health) {
    if (shape_list == NULL)
        return NULL;
    Result r;
    if (run_raw(p, numel, kind, &r) < 0) {
        Py_DECREF(shape_list);
        return NULL;
    }
    PyObject *item = PyDict_New();
    int bad = item == NULL;
    /* the keys in the order the Python path writes them */
    bad = bad || PyDict_SetItem(item, s_type, v_torch_tensor) < 0;
    bad = bad || PyDict_SetItem(item, s_dtype, name) < 0;
    bad = bad || PyDict_SetItem(item, s_shape, shape_list) < 0;
    bad = bad || PyDict_SetItem(item, key_names[0], r.max) < 0;
    bad = bad || PyDict_SetItem(item, key_names[1], r.min) < 0;
    bad = bad || set_new(item, key_names[2], PyFloat_FromDouble(r.mean)) < 0;
    bad = bad || set_new(item, key_names[3], PyFloat_FromDouble(r.norm)) < 0;
    bad = bad || PyDict_SetItem(item, s_requires_grad, rg) < 0;
    bad = bad || set_new(item, key_names[4], PyLong_FromSsize_t(r.zeros)) < 0;
    bad = bad || set_new(item, key_names[5], PyLong_FromSsize_t(r.nans)) < 0;
    bad = bad || set_new(item, key_names[6], PyLong_FromSsize_t(r.infs)) < 0;
    if (!bad && self->checksum) {
        char text[16];
        uint32_t crc = crc32_bytes((const unsigned char *)p, (size_t)numel * (size_t)kind_size[kind]);
        snprintf(text, sizeof text, "%08x", (unsigned)crc);
        bad = set_new(item, s_md5, PyUnicode_FromString(text)) < 0;
    }
    Py_DECREF(r.max);
    Py_DECREF(r.min);
    Py_DECREF(shape_list);
    if (bad) {
        Py_XDECREF(item);
        return NULL;
    }
    double h = health_of(&r);
    note_health(self, h);
    if (health != NULL)
        *health = h;
    return item;
}

/* The element count of a tensor of `dtype` and these sizes when the pass takes it (a kind it reads, at least one
   dimension, 1 <= numel < cache_min), with its kind and dtype name (borrowed); 0 when it does not (errors
   cleared: the Python path meets them). */
static Py_ssize_t plain_numel_below(HostItems *self, PyObject *dtype, const int64_t *sizes, Py_ssize_t ndim,
                                    int *kind, PyObject **name, Py_ssize_t limit) {
    PyObject *kind_obj = PyDict_GetItemWithError(self->kinds, dtype);   /* borrowed */
    *name = kind_obj ? PyDict_GetItemWithError(self->names, dtype) : NULL;
    if (kind_obj == NULL || *name == NULL || ndim <= 0) {
        PyErr_Clear();
        return 0;
    }
    *kind = (int)PyLong_AsLong(kind_obj);
    Py_ssize_t numel = 1;
    for (Py_ssize_t i = 0; i < ndim; i++) {
        if (sizes[i] <= 0)     /* empty: the Python path */
            return 0;
        /* saturates at the limit, exactly (numel * d >= limit iff numel > (limit - 1) / d) and without overflow,
           whatever the limit */
        Py_ssize_t d = sizes[i] >= limit ? limit : (Py_ssize_t)sizes[i];
        numel = (d >= limit || numel > (limit - 1) / d) ? limit : numel * d;
    }
    return numel < limit ? numel : 0;
}

static Py_ssize_t plain_numel(HostItems *self, PyObject *dtype, const int64_t *sizes, Py_ssize_t ndim, int *kind,
                              PyObject **name) {
    return plain_numel_below(self, dtype, sizes, ndim, kind, name, self->cache_min);
}

/* build_item with the shape list made from `sizes`. */
static PyObject *item_of(HostItems *self, int kind, PyObject *name, const int64_t *sizes, Py_ssize_t ndim,
                         const void *p, Py_ssize_t numel, PyObject *rg, double *health) {
    PyObject *shape_list = PyList_New(ndim);
    if (shape_list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < ndim; i++) {
        PyObject *d = PyLong_FromLongLong((long long)sizes[i]);
        if (d == NULL) {
            Py_DECREF(shape_list);
            return NULL;
        }
        PyList_SET_ITEM(shape_list, i, d);
    }
    return build_item(self, kind, name, shape_list, p, numel, rg, health);
}

/* item(t) -> dict, or None when `t` is not the plain case (see the top of this file). The tensor's facts are read
   as Python attributes here (_cgrad's ItemReader reads them from the TensorImpl and calls item_from_facts). */
static PyObject *HostItems_item(HostItems *self, PyObject *t) {
    PyObject *tp = (PyObject *)Py_TYPE(t);
    if (tp != self->tensor_type && tp != self->param_type)
        Py_RETURN_NONE;
    if (!attr_is(t, s_layout, self->strided) || !attr_is(t, s_is_cpu, Py_True))
        Py_RETURN_NONE;
    /* a negated view (torch._neg_view) holds the values before the negation in its memory */
    PyObject *neg = PyObject_CallMethodNoArgs(t, s_is_neg);
    Py_XDECREF(neg);
    if (neg != Py_False) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    PyObject *shape = dtype ? PyObject_GetAttr(t, s_shape) : NULL;
    if (shape == NULL || !PyTuple_Check(shape)) {
        PyErr_Clear();
        Py_XDECREF(dtype);
        Py_XDECREF(shape);
        Py_RETURN_NONE;
    }
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    int64_t small[16];
    int64_t *sizes = ndim <= 16 ? small : (int64_t *)PyMem_Malloc((size_t)ndim * sizeof(int64_t));
    PyObject *result = NULL, *name = NULL;
    int kind = 0;
    if (sizes == NULL) {
        result = PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ndim; i++) {
        sizes[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));   /* (an error reads -1: not plain) */
    }
    PyErr_Clear();
    Py_ssize_t numel = plain_numel(self, dtype, sizes, ndim, &kind, &name);
    if (numel == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *contig = PyObject_CallMethodNoArgs(t, s_is_contiguous);
    PyObject *ptr = contig == Py_True ? PyObject_CallMethodNoArgs(t, s_data_ptr) : NULL;
    Py_XDECREF(contig);
    unsigned long long address = ptr ? PyLong_AsUnsignedLongLong(ptr) : 0;
    Py_XDECREF(ptr);
    PyObject *rg = address ? PyObject_GetAttr(t, s_requires_grad) : NULL;
    if (rg == NULL) {          /* not contiguous, no storage (a functorch wrapper), or an error */
        PyErr_Clear();
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = item_of(self, kind, name, sizes, ndim, (const void *)(uintptr_t)address, numel, rg, NULL);
    Py_DECREF(rg);
done:
    if (sizes != small)
        PyMem_Free(sizes);
    Py_DECREF(dtype);   /* (after `name`'s last use: the dicts hold the dtype and its name alive) */
    Py_DECREF(shape);
    return result;
}

/* The same item from facts the caller read from the tensor itself (_cgrad.cpp reads them from the TensorImpl,
   without the seven attribute reads above): `t` for its exact type, `dtype` its torch.dtype (borrowed), the sizes
   of its ndim dimensions, the address of its contiguous CPU data (0 when it has none) and requires_grad. The
   caller has checked the layout (strided), the device (CPU) and contiguity. A new item, None (not the plain case)
   or NULL with an exception; `health` gets the item's health figure. Exported to _cgrad in the "_item_api"
   capsule (_cstats_api.h). */
static PyObject *facts_item(PyObject *obj, PyObject *t, PyObject *dtype, const int64_t *sizes, int ndim,
                             const void *p, int requires_grad, double *health, Py_ssize_t limit) {
    HostItems *self = (HostItems *)obj;
    PyObject *tp = (PyObject *)Py_TYPE(t);
    PyObject *name;
    int kind;
    if ((tp != self->tensor_type && tp != self->param_type) || p == NULL)
        Py_RETURN_NONE;
    Py_ssize_t numel = plain_numel_below(self, dtype, sizes, ndim, &kind, &name, limit);
    if (numel == 0)
        Py_RETURN_NONE;
    return item_of(self, kind, name, sizes, ndim, p, numel, requires_grad ? Py_True : Py_False, health);
}

static PyObject *item_from_facts(PyObject *obj, PyObject *t, PyObject *dtype, const int64_t *sizes, int ndim,
                                 const void *p, int requires_grad, double *health) {
    return facts_item(obj, t, dtype, sizes, ndim, p, requires_grad, health, ((HostItems *)obj)->cache_min);
}

/* (the pass's count is a Py_ssize_t; below that, any size) */
static PyObject *item_from_facts_any(PyObject *obj, PyObject *t, PyObject *dtype, const int64_t *sizes, int ndim,
                                     const void *p, int requires_grad, double *health) {
    return facts_item(obj, t, dtype, sizes, ndim, p, requires_grad, health, PY_SSIZE_T_MAX);
}

static void note_from_api(PyObject *obj, double health) {
    note_health((HostItems *)obj, health);
}

static PyObject *HostItems_note(HostItems *self, PyObject *h) {
    double v = PyFloat_AsDouble(h);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    note_health(self, v);
    Py_RETURN_NONE;
}

static PyObject *HostItems_reset(HostItems *self, PyObject *unused) {
    self->max_abs = 0.0;
    self->nonfinite = 0;
    self->nonfinite_values = 0;
    Py_RETURN_NONE;
}

static PyObject *crc32_at(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "crc32_at(address, nbytes)");
        return NULL;
    }
    unsigned long long address = PyLong_AsUnsignedLongLong(args[0]);
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (address == 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "crc32_at: needs a non-null address and a count >= 0");
        return NULL;
    }
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = crc32_bytes((const unsigned char *)(uintptr_t)address, (size_t)n);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef HostItems_methods[] = {
    {"item", (PyCFunction)HostItems_item, METH_O,
     "item(t) -> the dump.json item of a plain small CPU tensor (statistics, counts, md5 when asked), or None."},
    {"note", (PyCFunction)HostItems_note, METH_O,
     "note(health) -> None: adds the health figure of an item made elsewhere (summarise_into's result)."},
    {"reset", (PyCFunction)HostItems_reset, METH_NOARGS, "reset() -> None: clears the health figures."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef HostItems_members[] = {
    {"max_abs", T_DOUBLE, offsetof(HostItems, max_abs), READONLY, "largest finite max(|Max|, |Min|)"},
    {"nonfinite", T_PYSSIZET, offsetof(HostItems, nonfinite), READONLY, "items whose Max or Min is NaN/Inf"},
    {"nonfinite_values", T_INT, offsetof(HostItems, nonfinite_values), READONLY, "any statistic NaN/Inf"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HostItemsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tbprobe.collector._cstats.HostItems",
    .tp_basicsize = sizeof(HostItems),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "HostItems(tensor_type, param_type, strided, kinds, names, cache_min, checksum=False)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)HostItems_init,
    .tp_dealloc = (destructor)HostItems_dealloc,
    .tp_methods = HostItems_methods,
    .tp_members = HostItems_members,
};
