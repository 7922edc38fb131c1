/* Reading JSON text: tokens, strings, numbers, skipped values, lists of integers.
   Part of _rowtext.c, which includes it once (a unity build: the module is one translation unit). */

/* A cursor over ASCII JSON text. The readers take strict JSON (RFC 8259 plus NaN / Infinity / -Infinity, as the
   json module reads) and narrow it further: strings of printable ASCII without escapes only. 0 from a reader:
   not such a token here (the caller hands the entry back). */

typedef struct {
    const unsigned char *s;
    Py_ssize_t n, i;
} Cur;

/* (the cursor in locals: stores through c may alias the text, so the loop would reload c->i and c->n; most
   characters are above ' ' and leave at the first test) */
static inline void skip_ws(Cur *c) {
    const unsigned char *s = c->s;
    Py_ssize_t i = c->i, n = c->n;
    while (i < n) {
        unsigned char ch = s[i];
        if (ch > ' ' || (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r'))
            break;
        i++;
    }
    c->i = i;
}

static int take(Cur *c, const char *word) {
    size_t len = strlen(word);
    if ((size_t)(c->n - c->i) >= len && memcmp(c->s + c->i, word, len) == 0) {
        c->i += (Py_ssize_t)len;
        return 1;
    }
    return 0;
}

static int take_char(Cur *c, unsigned char ch) {
    if (c->i < c->n && c->s[c->i] == ch) {
        c->i++;
        return 1;
    }
    return 0;
}

/* A string of printable ASCII without escapes; its contents are s[*a, *b). 0: not such a string. */
static int raw_string(Cur *c, Py_ssize_t *a, Py_ssize_t *b) {
    if (c->i >= c->n || c->s[c->i] != '"')
        return 0;
    Py_ssize_t j = c->i + 1;
    while (j < c->n && c->s[j] != '"') {
        unsigned char ch = c->s[j];
        if (ch < 0x20 || ch > 0x7e || ch == '\\')
            return 0;
        j++;
    }
    if (j >= c->n)
        return 0;
    *a = c->i + 1;
    *b = j;
    c->i = j + 1;
    return 1;
}

/* A number token s[*a, *b): 1 an integer, 2 a float (fraction, exponent, NaN, Infinity), 0 not a number. */
static int raw_number(Cur *c, Py_ssize_t *a, Py_ssize_t *b) {
    const unsigned char *s = c->s;
    Py_ssize_t n = c->n, j = c->i;
    *a = j;
    if (take(c, "NaN") || take(c, "Infinity") || take(c, "-Infinity")) {
        *b = c->i;
        return 2;
    }
    if (j < n && s[j] == '-')
        j++;
    if (j < n && s[j] == '0') {
        j++;
    } else if (j < n && s[j] >= '1' && s[j] <= '9') {
        while (j < n && DIGIT(s[j]))
            j++;
    } else {
        return 0;
    }
    int kind = 1;
    if (j < n && s[j] == '.') {
        j++;
        if (!(j < n && DIGIT(s[j])))
            return 0;
        while (j < n && DIGIT(s[j]))
            j++;
        kind = 2;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (!(j < n && DIGIT(s[j])))
            return 0;
        while (j < n && DIGIT(s[j]))
            j++;
        kind = 2;
    }
    *b = j;
    c->i = j;
    return kind;
}

/* The text Python gives the number: int.__repr__ of an integer token (the token itself, "-0" aside),
   float.__repr__ of float(token). 1: not handled here (too long), -1 error. */
static int put_number(Buf *b, const unsigned char *s, Py_ssize_t a, Py_ssize_t e, int kind) {
    Py_ssize_t len = e - a;
    if (kind == 1) {
        if (len > 18)
            return 1;
        if (len == 2 && s[a] == '-' && s[a + 1] == '0')
            return PUT_LIT(b, "0");
        return put(b, (const char *)s + a, len);
    }
    double fast;
    if (fast_strtod(s + a, len, &fast))
        return put_float(b, fast);
    char tmp[64];
    if (len >= (Py_ssize_t)sizeof tmp)
        return 1;
    memcpy(tmp, s + a, (size_t)len);
    tmp[len] = '\0';
    char *end = NULL;
    double x = PyOS_string_to_double(tmp, &end, NULL);
    if (end != tmp + len) {
        PyErr_Clear();
        return 1;
    }
    if (x == -1.0 && PyErr_Occurred())
        return -1;
    return put_float(b, x);
}

/* Any JSON value (for keys the row text does not use), nested at most `depth` more levels. 0: not plain. */
static int skip_value(Cur *c, int depth) {
    Py_ssize_t a, e;
    if (c->i >= c->n || depth <= 0)
        return 0;
    unsigned char ch = c->s[c->i];
    if (ch == '"')
        return raw_string(c, &a, &e);
    if (ch == '[' || ch == '{') {
        unsigned char close = ch == '[' ? ']' : '}';
        c->i++;
        skip_ws(c);
        if (take_char(c, close))
            return 1;
        for (;;) {
            if (ch == '{') {
                if (!raw_string(c, &a, &e))
                    return 0;
                skip_ws(c);
                if (!take_char(c, ':'))
                    return 0;
                skip_ws(c);
            }
            if (!skip_value(c, depth - 1))
                return 0;
            skip_ws(c);
            if (take_char(c, close))
                return 1;
            if (!take_char(c, ','))
                return 0;
            skip_ws(c);
        }
    }
    if (take(c, "true") || take(c, "false") || take(c, "null"))
        return 1;
    return raw_number(c, &a, &e) != 0;
}

/* One member of an item object. kind: 's' string, 'i' integer, 'f' float, 'l' list of integers, 't' true,
   'F' false, 'n' null; value token s[va, vb) ([...] contents for a list). */
typedef struct {
    Py_ssize_t ka, kb, va, vb;
    char kind;
} Field;

static int field_key_is(const Cur *c, const Field *f, const char *name) {
    size_t len = strlen(name);
    return (size_t)(f->kb - f->ka) == len && memcmp(c->s + f->ka, name, len) == 0;
}

/* [int, int, ...]: 0 not such a list */
static int raw_int_list(Cur *c, Field *f) {
    Py_ssize_t a, e;
    if (!take_char(c, '['))
        return 0;
    f->va = c->i;
    skip_ws(c);
    if (!take_char(c, ']')) {
        for (;;) {
            if (raw_number(c, &a, &e) != 1 || e - a > 18)
                return 0;
            skip_ws(c);
            if (take_char(c, ']'))
                break;
            if (!take_char(c, ','))
                return 0;
            skip_ws(c);
        }
    }
    f->vb = c->i - 1;
    f->kind = 'l';
    return 1;
}

/* str() of the list of integers in s[va, vb) (checked by raw_int_list) */
static int put_int_list(Buf *b, const unsigned char *s, Py_ssize_t va, Py_ssize_t vb) {
    Cur c = {s, vb, va};
    Py_ssize_t a, e;
    int first = 1;
    if (PUT_LIT(b, "[") < 0)
        return -1;
    skip_ws(&c);
    while (c.i < c.n) {
        if (raw_number(&c, &a, &e) != 1) {  /* checked by raw_int_list: cannot happen */
            PyErr_SetString(PyExc_SystemError, "raw_texts: shape changed");
            return -1;
        }
        if ((!first && PUT_LIT(b, ", ") < 0) || put_number(b, s, a, e, 1) < 0)
            return -1;
        first = 0;
        skip_ws(&c);
        take_char(&c, ',');
        skip_ws(&c);
    }
    return PUT_LIT(b, "]");
}

static int put_span(Buf *b, const Cur *c, Py_ssize_t a, Py_ssize_t e) {
    return put(b, (const char *)c->s + a, e - a);
}

static const char *flag_text(char kind) {
    return kind == 't' ? "True" : kind == 'F' ? "False" : kind == 'n' ? "null" : NULL;
}
