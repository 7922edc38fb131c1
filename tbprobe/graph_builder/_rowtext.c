/* tbprobe.graph_builder._rowtext: the per-entry text work of a graph build and a statistics compare, in C.

   A 100k-entry build or compare spends most of its Python time making tb_nodes.input_data / output_data text:
   millions of floats to text, a dict lookup per field, a join per item and per entry. These functions make the
   same bytes as the Python they replace (tbprobe/graph_builder/items.py, fast_path.py, compare.py), or hand the
   case back (None) to that Python when it is anything but the plain layout of plain items:

   entry_texts(item_text, name, entry, with_md5)   a node's own texts from its decoded entry (_rowtext_items.h)
   raw_texts(name, entry_json_text, with_md5[, stored])  the same from the entry's JSON text, not decoded
                                                  (stored: the text as dump_json keeps it, `name": {...}`)
                                                  (_rowtext_raw.h)
   compare_plain(...), float_slot(...)            statistics-mode compare of an entry pair / one item pair
                                                  (_rowtext_compare.h, _rowtext_slots.h)

   Floats are written as float.__repr__ writes them (exact integer arithmetic for the usual magnitudes, else
   PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0), which is float.__repr__ itself) and number tokens read
   as float() reads them (_rowtext_text.h). Plain CPython C API; every type is checked before it is used, and
   anything unexpected is handed back, never guessed. tests/graph_builder/test_fast_path.py holds every function
   against the general path (and float_text / number_text against float.__repr__ / json) on varied and hostile
   input. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Interned keys and texts (set at import), and the keys of a standard statistics item. */
static PyObject *s_type, *s_value, *s_input_args, *s_input, *s_input_kwargs, *s_parameters, *s_output,
    *s_parameters_grad, *s_dtype, *s_shape, *s_Max, *s_Min, *s_Mean, *s_Norm, *s_requires_grad, *s_True, *s_False,
    *s_pass;

/* The eight keys of a standard statistics item, in the reference's order (items.is_std_item). */
static const char *const STD_KEYS[8] = {"type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"};

#include "_rowtext_text.h"
#include "_rowtext_items.h"
#include "_rowtext_json.h"
#include "_rowtext_raw.h"
#include "_rowtext_slots.h"
#include "_rowtext_compare.h"

/* ---------------------------------------------------------------------------------------- test hooks */

/* float_text(x): float.__repr__(x) made as the row texts make it (the tests hold it against float.__repr__) */
static PyObject *float_text(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyFloat_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "float_text(x): x must be a float");
        return NULL;
    }
    char stack[64];
    Buf b = {stack, 0, sizeof stack, 0};
    PyObject *out = put_float(&b, PyFloat_AS_DOUBLE(arg)) < 0 ? NULL : buf_str(&b);
    buf_free(&b);
    return out;
}

/* number_text(token): the row text of a JSON number token as raw_texts makes it (for the tests), or None */
static PyObject *number_text(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyUnicode_CheckExact(arg) || !PyUnicode_IS_ASCII(arg))
        Py_RETURN_NONE;
    Cur c = {PyUnicode_1BYTE_DATA(arg), PyUnicode_GET_LENGTH(arg), 0};
    Py_ssize_t a, e;
    int kind = raw_number(&c, &a, &e);
    if (kind == 0 || c.i != c.n)
        Py_RETURN_NONE;
    char stack[64];
    Buf b = {stack, 0, sizeof stack, 0};
    int rc = put_number(&b, c.s, a, e, kind);
    PyObject *out = rc < 0 ? NULL : rc == 1 ? Py_NewRef(Py_None) : buf_str(&b);
    buf_free(&b);
    return out;
}


static PyMethodDef methods[] = {
    {"compare_plain", (PyCFunction)(void (*)(void))compare_plain, METH_FASTCALL,
     "compare_plain(debug_name, de, bench_name, be, exempt, placeholder, msgs, bench_texts, item_text) -> "
     "(precision, input text, output text, worst NormRelativeErr, inputs ok, bench texts), or None"},
    {"number_text", number_text, METH_O, "number_text(token) -> the row text of a JSON number, or None"},
    {"float_text", float_text, METH_O, "float_text(x) -> float.__repr__(x)"},
    {"raw_texts", (PyCFunction)(void (*)(void))raw_texts, METH_FASTCALL,
     "raw_texts(name, entry_json_text, with_md5, stored=False) -> (input_data, output_data) text, or None"},
    {"float_slot", (PyCFunction)(void (*)(void))float_slot, METH_FASTCALL,
     "float_slot(key, is_output, debug_item, bench_item) -> compare slot list, or None"},
    {"entry_texts", (PyCFunction)(void (*)(void))entry_texts, METH_FASTCALL,
     "entry_texts(item_text, name, entry, with_md5) -> (input_data, output_data) text, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rowtext", "Row text of plain dump entries.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rowtext(void) {
    init_fast_floats();
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&s_type, "type"},           {&s_value, "value"},       {&s_input_args, "input_args"},
                 {&s_input, "input"},         {&s_input_kwargs, "input_kwargs"},
                 {&s_parameters, "parameters"}, {&s_output, "output"}, {&s_parameters_grad, ".parameters_grad"},
                 {&s_dtype, "dtype"}, {&s_shape, "shape"}, {&s_Max, "Max"}, {&s_Min, "Min"}, {&s_Mean, "Mean"},
                 {&s_Norm, "Norm"}, {&s_requires_grad, "requires_grad"}, {&s_True, "True"},
                 {&s_False, "False"}, {&s_pass, "pass"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    }
    return PyModule_Create(&module);
}
