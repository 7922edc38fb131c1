/* tbprobe.formats._dump_split: the fast path of _dump_parse._split_members in C.

   split_members(buf, start, end, raw) -> None, or the position reached

   buf[start:end] is `name": {...},\n  "name": {...}...` (each piece starts just after a name's opening quote;
   pieces are separated by `,\n  "`, the entry boundary of json.dump(indent=1)). For each piece, left to right,
   as str.split would cut them: if the buffer is one byte per character, the name has no backslash and no
   control character, `": {` follows the name and the piece ends with `}`, then raw[name] = piece. The first
   piece that is anything else stops the walk: its start is returned, and the Python loop takes over from there
   with exactly the checks, messages and offsets it always had. Returns None when every piece was taken (not
   `end`: an empty last piece starts there, and that one goes to the Python loop too).

   Like the Python loop, a piece is not checked to be balanced here: the full decoder reads it when it is used
   (dump_json.LazyEntries) and reports a bad one then. Never reads outside buf[start:end]. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static const char SEP[] = ",\n  \"";
#define SEP_LEN 5

/* the start of the next `,\n  "` in s[i:n], or n */
static Py_ssize_t find_sep(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    while (n - i >= SEP_LEN) {
        const unsigned char *p = memchr(s + i, ',', (size_t)(n - i - SEP_LEN + 1));
        if (p == NULL)
            return n;
        i = p - s;
        if (memcmp(p + 1, SEP + 1, SEP_LEN - 1) == 0)
            return i;
        i++;
    }
    return n;
}

/* the length of a plain name at the start of s[0:n] (up to its closing quote), or -1 */
static Py_ssize_t plain_name(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '"')
            return i;
        if (c == '\\' || c < 0x20)
            return -1;
    }
    return -1;
}

static PyObject *split_members(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Py_ssize_t start, end;
    if (nargs != 4 || !PyUnicode_CheckExact(args[0]) || !PyDict_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "split_members(buf: str, start: int, end: int, raw: dict)");
        return NULL;
    }
    PyObject *buf = args[0], *raw = args[3];
    if ((start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    if ((end = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(buf);
    if (start < 0 || end > len) {
        PyErr_SetString(PyExc_ValueError, "split_members: start and end must lie within the buffer");
        return NULL;
    }
    if (start >= end || PyUnicode_KIND(buf) != PyUnicode_1BYTE_KIND)
        return PyLong_FromSsize_t(start);  // two- or four-byte text: the Python loop
    const unsigned char *s = PyUnicode_1BYTE_DATA(buf);
    Py_ssize_t off = start;
    for (;;) {
        Py_ssize_t stop = find_sep(s, off, end);  // the piece is s[off:stop]
        Py_ssize_t n = plain_name(s + off, stop - off);
        // `name": {` ... `}`: the '{' at n+3 is before the last character, so that cannot be the same '}'
        if (n < 0 || stop - off < n + 5 || memcmp(s + off + n, "\": {", 4) != 0 || s[stop - 1] != '}')
            return PyLong_FromSsize_t(off);
        PyObject *name = PyUnicode_Substring(buf, off, off + n);
        PyObject *piece = name == NULL ? NULL : PyUnicode_Substring(buf, off, stop);
        int rc = piece == NULL ? -1 : PyDict_SetItem(raw, name, piece);
        Py_XDECREF(name);
        Py_XDECREF(piece);
        if (rc < 0)
            return NULL;
        if (stop == end)
            Py_RETURN_NONE;
        off = stop + SEP_LEN;
    }
}

static PyMethodDef methods[] = {
    {"split_members", (PyCFunction)(void (*)(void))split_members, METH_FASTCALL,
     "split_members(buf, start, end, raw) -> None when buf[start:end] was all plain pieces, else where the "
     "first other piece starts (see _dump_parse)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dump_split", "dump.json entry splitting.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__dump_split(void) { return PyModule_Create(&module); }
