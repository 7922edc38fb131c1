/* Row text of entries straight from their JSON text (raw_texts).
   Part of _rowtext.c, which includes it once (a unity build: the module is one translation unit). */

/* raw_texts(name, text, with_md5): entry_texts of the entry whose JSON text (an object, as the dump holds it) is
   `text`, without decoding it to Python objects first: the same bytes, or None when the text is anything but
   the plain layout in plain JSON (then the caller decodes it, and a broken entry is reported there). Accepted:
   strict JSON (RFC 8259 plus NaN / Infinity / -Infinity, as the json module reads), strings of printable ASCII
   without escapes, integers of up to 18 digits, floats read as float() reads them (as the json module
   does), items that are null, standard statistics items or plain scalars, no repeated keys. */

/* One item: null, a standard statistics item or a plain scalar (not with md5), as put_item writes them.
   0 written, 1 not such an item, -1 error. */
static int raw_item(Cur *c, Buf *b, int with_md5) {
    if (take(c, "null"))
        return PUT_LIT(b, "\"value\": \"null\"");
    if (!take_char(c, '{'))
        return 1;
    Field f[8];
    int nf = 0;
    skip_ws(c);
    for (;;) {
        if (nf == 8)
            return 1;
        Field *x = &f[nf];
        if (!raw_string(c, &x->ka, &x->kb))
            return 1;
        skip_ws(c);
        if (!take_char(c, ':'))
            return 1;
        skip_ws(c);
        if (c->i >= c->n)
            return 1;
        unsigned char ch = c->s[c->i];
        if (ch == '"') {
            if (!raw_string(c, &x->va, &x->vb))
                return 1;
            x->kind = 's';
        } else if (ch == '[') {
            if (!raw_int_list(c, x))
                return 1;
        } else if (take(c, "true")) {
            x->kind = 't';
        } else if (take(c, "false")) {
            x->kind = 'F';
        } else if (take(c, "null")) {
            x->kind = 'n';
        } else {
            int kind = raw_number(c, &x->va, &x->vb);
            if (kind == 0)
                return 1;
            x->kind = kind == 1 ? 'i' : 'f';
        }
        nf++;
        skip_ws(c);
        if (take_char(c, '}'))
            break;
        if (!take_char(c, ','))
            return 1;
        skip_ws(c);
    }
    if (nf == 8) {
        for (int i = 0; i < 8; i++)
            if (!field_key_is(c, &f[i], STD_KEYS[i]))
                return 1;
        if (f[0].kind != 's' || f[1].kind != 's' || f[2].kind != 'l' || flag_text(f[7].kind) == NULL)
            return 1;
        for (int i = 3; i < 7; i++)
            if (f[i].kind != 'i' && f[i].kind != 'f')
                return 1;
        static const char *const LABELS[4] = {"\", \"Max\": \"", "\", \"Min\": \"", "\", \"Mean\": \"",
                                              "\", \"Norm\": \""};
        if (PUT_LIT(b, "\"type\": \"") < 0 || put_span(b, c, f[0].va, f[0].vb) < 0 ||
            PUT_LIT(b, "\", \"dtype\": \"") < 0 || put_span(b, c, f[1].va, f[1].vb) < 0 ||
            PUT_LIT(b, "\", \"shape\": \"") < 0 || put_int_list(b, c->s, f[2].va, f[2].vb) < 0)
            return -1;
        for (int i = 0; i < 4; i++) {
            if (put(b, LABELS[i], (Py_ssize_t)strlen(LABELS[i])) < 0)
                return -1;
            int rc = put_number(b, c->s, f[3 + i].va, f[3 + i].vb, f[3 + i].kind == 'i' ? 1 : 2);
            if (rc != 0)
                return rc;
        }
        const char *grad = flag_text(f[7].kind);
        if (PUT_LIT(b, "\", \"requires_grad\": \"") < 0 || put(b, grad, (Py_ssize_t)strlen(grad)) < 0)
            return -1;
        return PUT_LIT(b, "\", \"data_name\": \"-1\"");
    }
    if (nf != 2 || with_md5)
        return 1;
    Field *type = field_key_is(c, &f[0], "type") ? &f[0] : &f[1];
    Field *value = type == &f[0] ? &f[1] : &f[0];
    if (!field_key_is(c, type, "type") || !field_key_is(c, value, "value") || type->kind != 's')
        return 1;
    char text[64];
    Buf tb = {text, 0, sizeof text, 0};
    const char *tname;
    int rc = 0;
    if (value->kind == 't' || value->kind == 'F') {
        tname = "bool";
        rc = value->kind == 't' ? PUT_LIT(&tb, "True") : PUT_LIT(&tb, "False");
    } else if (value->kind == 'i' || value->kind == 'f') {
        tname = value->kind == 'i' ? "int" : "float";
        rc = put_number(&tb, c->s, value->va, value->vb, value->kind == 'i' ? 1 : 2);
    } else {
        return 1;
    }
    if (rc == 0) {
        rc = -1;
        if (PUT_LIT(b, "\"type\": \"") < 0 || put_span(b, c, type->va, type->vb) < 0 ||
            PUT_LIT(b, "\", \"value\": \"") < 0 || put(b, tb.p, tb.n) < 0 ||
            PUT_LIT(b, "\", \"data_name\": \"-1\", \"requires_grad\": \"null\", \"Max\": \"") < 0 ||
            put(b, tb.p, tb.n) < 0 || PUT_LIT(b, "\", \"Min\": \"") < 0 || put(b, tb.p, tb.n) < 0 ||
            PUT_LIT(b, "\", \"Mean\": \"") < 0 || put(b, tb.p, tb.n) < 0 || PUT_LIT(b, "\", \"Norm\": \"") < 0 ||
            put(b, tb.p, tb.n) < 0 || PUT_LIT(b, "\", \"dtype\": \"<class ") < 0 ||
            put(b, tname, (Py_ssize_t)strlen(tname)) < 0 || PUT_LIT(b, ">\", \"shape\": \"[]\"") < 0)
            goto done;
        rc = 0;
    }
done:
    buf_free(&tb);
    return rc;
}

typedef struct {
    Buf *b;
    const char *name;
    Py_ssize_t name_len;
    int count;
    int with_md5;
} RawSide;

/* "name<group><key>": {item} */
static int raw_member(RawSide *r, Cur *c, const char *group, const char *key, Py_ssize_t key_len) {
    Buf *b = r->b;
    if (put(b, r->count ? ", \"" : "{\"", r->count ? 3 : 2) < 0 || put(b, r->name, r->name_len) < 0 ||
        put(b, group, (Py_ssize_t)strlen(group)) < 0 || put(b, key, key_len) < 0 || PUT_LIT(b, "\": {") < 0)
        return -1;
    int rc = raw_item(c, b, r->with_md5);
    if (rc != 0)
        return rc;
    r->count++;
    return PUT_LIT(b, "}");
}

/* The items of the array at s[start...]: "name.<group><index>" members. 0 done, 1 not plain, -1 error. */
static int raw_list(RawSide *r, const Cur *whole, Py_ssize_t start, const char *group) {
    Cur c = *whole;
    c.i = start;
    if (!take_char(&c, '['))
        return 1;
    skip_ws(&c);
    if (take_char(&c, ']'))
        return 0;
    for (Py_ssize_t k = 0;; k++) {
        char idx[32];
        int rc = raw_member(r, &c, group, idx, snprintf(idx, sizeof idx, "%zd", k));
        if (rc != 0)
            return rc;
        skip_ws(&c);
        if (take_char(&c, ']'))
            return 0;
        if (!take_char(&c, ','))
            return 1;
        skip_ws(&c);
    }
}

#define MAX_KEYS 64

/* The members of the object at s[start...]: "name.<group><key>" members; repeated keys are not plain (the
   decoded dict would keep the first place and the last value). */
static int raw_dict(RawSide *r, const Cur *whole, Py_ssize_t start, const char *group) {
    Cur c = *whole;
    c.i = start;
    Py_ssize_t ka[MAX_KEYS], kb[MAX_KEYS];
    int nk = 0;
    if (!take_char(&c, '{'))
        return 1;
    skip_ws(&c);
    if (take_char(&c, '}'))
        return 0;
    for (;;) {
        if (nk == MAX_KEYS || !raw_string(&c, &ka[nk], &kb[nk]))
            return 1;
        for (int j = 0; j < nk; j++)
            if (kb[j] - ka[j] == kb[nk] - ka[nk] && memcmp(c.s + ka[j], c.s + ka[nk], (size_t)(kb[j] - ka[j])) == 0)
                return 1;
        skip_ws(&c);
        if (!take_char(&c, ':'))
            return 1;
        skip_ws(&c);
        int rc = raw_member(r, &c, group, (const char *)c.s + ka[nk], kb[nk] - ka[nk]);
        if (rc != 0)
            return rc;
        nk++;
        skip_ws(&c);
        if (take_char(&c, '}'))
            return 0;
        if (!take_char(&c, ','))
            return 1;
        skip_ws(&c);
    }
}

static const char *const RAW_KEYS[5] = {"input_args", "input", "input_kwargs", "parameters", "output"};

/* Where the entry's object starts in a stored entry text `name": {...}` (the form dump_json keeps: from just
   after the name's opening quote): past the name's closing quote, blanks, the colon and blanks; -1 when the text
   is not of that form. */
static Py_ssize_t stored_value_start(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n && s[i] != '"')
        i += s[i] == '\\' ? 2 : 1;  /* an escape's next character cannot end the name */
    if (i >= n)
        return -1;
    Cur k = {s, n, i + 1};
    skip_ws(&k);
    if (!take_char(&k, ':'))
        return -1;
    skip_ws(&k);
    return k.i;
}

static PyObject *raw_texts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "raw_texts(name, text, with_md5, stored=False)");
        return NULL;
    }
    PyObject *name = args[0], *text = args[1];
    int with_md5 = PyObject_IsTrue(args[2]);
    if (with_md5 < 0)
        return NULL;
    int stored = nargs == 4 ? PyObject_IsTrue(args[3]) : 0;
    if (stored < 0)
        return NULL;
    if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    int has = PyUnicode_Contains(name, s_parameters_grad);
    if (has < 0)
        return NULL;
    if (has)
        Py_RETURN_NONE;
    const unsigned char *data = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    if (stored) {
        Py_ssize_t from = stored_value_start(data, len);
        if (from < 0)
            Py_RETURN_NONE;
        data += from;
        len -= from;
    }
    /* the whole text is one object: no blanks around it (the decoder would refuse trailing ones) */
    Cur c = {data, len, 0};
    if (c.n < 2 || c.s[0] != '{' || c.s[c.n - 1] != '}')
        Py_RETURN_NONE;
    Py_ssize_t at[5] = {-1, -1, -1, -1, -1};
    c.i = 1;
    skip_ws(&c);
    if (!take_char(&c, '}')) {
        for (;;) {
            Py_ssize_t a, e;
            if (!raw_string(&c, &a, &e))
                Py_RETURN_NONE;
            skip_ws(&c);
            if (!take_char(&c, ':'))
                Py_RETURN_NONE;
            skip_ws(&c);
            for (int j = 0; j < 5; j++) {
                size_t len = strlen(RAW_KEYS[j]);
                if ((size_t)(e - a) == len && memcmp(c.s + a, RAW_KEYS[j], len) == 0) {
                    if (at[j] >= 0)
                        Py_RETURN_NONE;
                    at[j] = c.i;
                }
            }
            if (!skip_value(&c, 32))
                Py_RETURN_NONE;
            skip_ws(&c);
            if (take_char(&c, '}'))
                break;
            if (!take_char(&c, ','))
                Py_RETURN_NONE;
            skip_ws(&c);
        }
    }
    if (c.i != c.n)
        Py_RETURN_NONE;

    char name_stack[256], in_stack[4096], out_stack[2048];
    Buf nb = {name_stack, 0, sizeof name_stack, 0};
    Buf ib = {in_stack, 0, sizeof in_stack, 0};
    Buf ob = {out_stack, 0, sizeof out_stack, 0};
    PyObject *result = NULL;
    if (put_escaped(&nb, name) < 0)
        goto done;
    RawSide in = {&ib, nb.p, nb.n, 0, with_md5};
    RawSide out = {&ob, nb.p, nb.n, 0, with_md5};
    /* entry_texts's order: positional inputs, keyword inputs, parameters; then the outputs */
    int rc = 0;
    if (rc == 0 && at[0] >= 0)
        rc = raw_list(&in, &c, at[0], ".input.");
    if (rc == 0 && at[1] >= 0)
        rc = raw_list(&in, &c, at[1], ".input.");
    if (rc == 0 && at[2] >= 0)
        rc = raw_dict(&in, &c, at[2], ".input.");
    if (rc == 0 && at[3] >= 0)
        rc = raw_dict(&in, &c, at[3], ".parameters.");
    if (rc == 0 && at[4] >= 0)
        rc = raw_list(&out, &c, at[4], ".output.");
    if (rc < 0)
        goto done;
    if (rc == 1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = side_texts(&ib, in.count, &ob, out.count);
done:
    buf_free(&nb);
    buf_free(&ib);
    buf_free(&ob);
    return result;
}
