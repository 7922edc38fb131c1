/* Text primitives: the output buffer, JSON string escaping, float.__repr__ and float() of number tokens.
   Part of _rowtext.c, which includes it once (a unity build: the module is one translation unit). */

/* ------------------------------------------------------------------------------------------- output buffer */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    int heap;          /* p was allocated here (else it is the caller's stack array) */
} Buf;

static int buf_grow(Buf *b, Py_ssize_t extra);

/* room for `extra` more bytes: the common case inline, growing out of line */
static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    return b->n + extra <= b->cap ? 0 : buf_grow(b, extra);
}

static int buf_grow(Buf *b, Py_ssize_t extra) {
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->n + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *p;
    if (b->heap) {
        p = PyMem_Realloc(b->p, (size_t)cap);
    } else {
        p = PyMem_Malloc((size_t)cap);
        if (p != NULL)
            memcpy(p, b->p, (size_t)b->n);
    }
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    b->heap = 1;
    return 0;
}

static void buf_free(Buf *b) {
    if (b->heap)
        PyMem_Free(b->p);
    b->heap = 0;
    b->p = NULL;
}

static inline int put(Buf *b, const char *s, Py_ssize_t len) {
    if (buf_reserve(b, len) < 0)
        return -1;
    memcpy(b->p + b->n, s, (size_t)len);
    b->n += len;
    return 0;
}

#define PUT_LIT(b, s) put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* json.encoder.encode_basestring_ascii without the quotes: printable ASCII as is (but " and \), the five short
   escapes, everything else as \uXXXX (lower-case hex; a surrogate pair above U+FFFF). */
static int put_escaped(Buf *b, PyObject *s) {
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_IS_ASCII(s)) {
        const unsigned char *d = PyUnicode_1BYTE_DATA(s);
        Py_ssize_t i = 0;
        /* the common case: nothing to escape */
        while (i < len && d[i] >= ' ' && d[i] <= '~' && d[i] != '"' && d[i] != '\\')
            i++;
        if (i == len)
            return put(b, (const char *)d, len);
    }
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    /* at most 12 bytes per code point */
    if (len > (PY_SSIZE_T_MAX - b->n) / 12) {
        PyErr_NoMemory();
        return -1;
    }
    if (buf_reserve(b, len * 12) < 0)
        return -1;
    char *o = b->p + b->n;
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '\\': *o++ = '\\'; break;
        case '"': *o++ = '"'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            if (c >= 0x10000) {
                Py_UCS4 v = c - 0x10000;
                Py_UCS4 hi = 0xd800 | ((v >> 10) & 0x3ff), lo = 0xdc00 | (v & 0x3ff);
                *o++ = 'u';
                *o++ = hex[(hi >> 12) & 0xf]; *o++ = hex[(hi >> 8) & 0xf];
                *o++ = hex[(hi >> 4) & 0xf]; *o++ = hex[hi & 0xf];
                *o++ = '\\';
                c = lo;
            }
            *o++ = 'u';
            *o++ = hex[(c >> 12) & 0xf]; *o++ = hex[(c >> 8) & 0xf];
            *o++ = hex[(c >> 4) & 0xf]; *o++ = hex[c & 0xf];
        }
    }
    b->n = o - b->p;
    return 0;
}

/* An ASCII str as is (the caller checked PyUnicode_IS_ASCII). */
static int put_ascii(Buf *b, PyObject *s) {
    return put(b, (const char *)PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s));
}

/* ------------------------------------------------------------------------------- float.__repr__, fast */
/* float.__repr__ is the shortest decimal that reads back as the same double (the closest such one), in fixed
   notation from 1e-4 up to 1e16. CPython's dtoa gets it with big-number arithmetic, most of a row's cost.
   For 2^-14 <= |x| < 2^53 the same digits come from exact 128-bit integer arithmetic here: with x = m 2^e, the
   doubles' rounding interval around x is [L, U] 2^(e-k); a decimal d 10^-p reads back as x exactly when
   L 5^p <= d 2^s <= U 5^p (s = k - e - p; the ends count when m is even: reading rounds half to even). The
   fewest digits is the smallest p with such a d (if d works at p, 10d works at p + 1, so one search finds it),
   and of those d the closest to x. Anything else (other magnitudes, a tie for the closest, a result outside
   fixed notation) goes to PyOS_double_to_string, which is float.__repr__ itself. */

#define DIGIT(ch) ((ch) >= '0' && (ch) <= '9')

/* The exact arithmetic needs 128-bit integers, and the one-operation fast read needs doubles evaluated as
   doubles (SSE2, not x87): elsewhere every float goes through CPython's own functions. */
#if defined(__SIZEOF_INT128__) && defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define ROWTEXT_FAST_FLOATS 1
typedef unsigned __int128 u128;


/* The range [*lo, *hi] of d at precision p (empty when *lo > *hi); 0 when p is outside what 128 bits hold. */
static u128 POW5[31];   /* 5^0 .. 5^30, set at import */

static int digits_range(u128 L, u128 U, int inclusive, int s, int p, u128 *lo, u128 *hi) {
    if (s < 0 || s > 120 || p < 0 || p > 30)
        return 0;
    u128 A = L * POW5[p], B = U * POW5[p], mask = ((u128)1 << s) - 1;
    u128 a = A >> s, b = B >> s;
    /* lo: the first d with d 2^s >= A (inclusive) or > A; hi: the last with d 2^s <= B (inclusive) or < B */
    *lo = (A & mask) ? a + 1 : (inclusive ? a : a + 1);
    *hi = (B & mask) ? b : (inclusive ? b : b - 1);
    return 1;
}

/* The shortest repr of x into out (at least 32 bytes): its length, or 0 when this case is not handled here. */
static int fast_repr(char *out, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int neg = (int)(bits >> 63), be = (int)((bits >> 52) & 0x7ff);
    uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
    if (be - 1023 < -14 || be - 1023 > 52)
        return 0;
    uint64_t m = frac | (UINT64_C(1) << 52);
    int e = be - 1075;                              /* x = m 2^e */
    int k = frac == 0 ? 2 : 1;                      /* a power of two: the gap below is half the gap above */
    u128 X = (u128)m << k, L = X - 1, U = X + (k == 2 ? 2 : 1);   /* in units of 2^(e-k) */
    int inclusive = (m & 1) == 0;
    /* start near 15 significant digits: random doubles need 16 or 17 */
    int p = 15 - ((be - 1023) * 30103 / 100000 + 1);
    if (p < 0)
        p = 0;
    u128 lo, hi;
    if (!digits_range(L, U, inclusive, k - e - p, p, &lo, &hi))
        return 0;
    if (lo <= hi) {
        u128 lo2, hi2;
        while (p > 0 && digits_range(L, U, inclusive, k - e - (p - 1), p - 1, &lo2, &hi2) && lo2 <= hi2) {
            p--;
            lo = lo2;
            hi = hi2;
        }
    } else {
        do {
            p++;
            if (!digits_range(L, U, inclusive, k - e - p, p, &lo, &hi))
                return 0;
        } while (lo > hi);
    }
    int s = k - e - p;
    u128 d = lo;
    if (hi > lo) {                                  /* the closest to x; a tie is left to dtoa */
        u128 T = X * POW5[p];
        d = T >> s;
        if (s > 0) {
            u128 rem = T & (((u128)1 << s) - 1), half = (u128)1 << (s - 1);
            if (rem == half)
                return 0;
            if (rem > half)
                d++;
        }
        if (d < lo)
            d = lo;
        if (d > hi)
            d = hi;
    }
    if (d >> 64)
        return 0;
    char digits[24];
    int nd = 0;
    uint64_t v = (uint64_t)d;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    int decpt = nd - p;                             /* x = 0.digits 10^decpt */
    if (decpt <= -4 || decpt > 16)
        return 0;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++)
            *o++ = '0';
        for (int i = nd - 1; i >= 0; i--)
            *o++ = digits[i];
    } else {
        for (int i = nd - 1; i >= 0; i--) {
            *o++ = digits[i];
            if (nd - 1 - i == decpt - 1 && i > 0)
                *o++ = '.';
        }
        if (decpt >= nd) {
            for (int i = nd; i < decpt; i++)        /* cannot happen: p >= 0 */
                *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        }
    }
    return (int)(o - out);
}

/* Whether the decimal D 10^-p reads as x (D < 2^64): the same interval test, from the other side. */
static int reads_as(uint64_t D, int p, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int be = (int)((bits >> 52) & 0x7ff);
    if (be == 0 || be == 0x7ff)
        return 0;
    uint64_t frac = bits & ((UINT64_C(1) << 52) - 1), m = frac | (UINT64_C(1) << 52);
    int e = be - 1075, k = frac == 0 ? 2 : 1, s = k - e - p;
    if (s < 0 || s > 63 || p < 0 || p > 30)
        return 0;
    u128 X = (u128)m << k, L = X - 1, U = X + (k == 2 ? 2 : 1), v = (u128)D << s;
    u128 A = L * POW5[p], B = U * POW5[p];
    return (m & 1) == 0 ? (A <= v && v <= B) : (A < v && v < B);
}

/* float(token) for a JSON number token (no NaN / Infinity): 1 and *out, or 0 when not handled here. The
   result is checked exactly (reads_as), so the long double estimate only has to be within one step. */
static int fast_strtod(const unsigned char *t, Py_ssize_t len, double *out) {
    static const double P10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    Py_ssize_t i = 0;
    int neg = 0, nd = 0, frac_digits = 0, exp = 0, exp_neg = 0;
    uint64_t D = 0;
    if (i < len && t[i] == '-') {
        neg = 1;
        i++;
    }
    for (; i < len && DIGIT(t[i]); i++) {
        if (D == 0 && t[i] == '0')
            continue;
        if (++nd > 19)
            return 0;
        D = D * 10 + (uint64_t)(t[i] - '0');
    }
    if (i < len && t[i] == '.') {
        for (i++; i < len && DIGIT(t[i]); i++) {
            frac_digits++;
            if (D == 0 && t[i] == '0')
                continue;
            if (++nd > 19)
                return 0;
            D = D * 10 + (uint64_t)(t[i] - '0');
        }
    }
    if (i < len && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < len && (t[i] == '+' || t[i] == '-'))
            exp_neg = t[i++] == '-';
        for (; i < len && DIGIT(t[i]); i++) {
            if (exp > 1000)
                return 0;
            exp = exp * 10 + (t[i] - '0');
        }
    }
    if (i != len)
        return 0;
    int E = (exp_neg ? -exp : exp) - frac_digits;   /* value = D 10^E */
    double x;
    if (D == 0) {
        x = 0.0;
    } else if (D < (UINT64_C(1) << 53) && E >= -22 && E <= 22) {
        /* both operands exact: one correctly rounded operation (SSE2 doubles, no extended precision) */
        x = E < 0 ? (double)D / P10[-E] : (double)D * P10[E];
    } else {
        if (E > 0 || E < -30)
            return 0;
        long double y = (long double)D;
        for (int j = 0; j < -E; j++)
            y /= 10.0L;
        x = (double)y;
        if (!reads_as(D, -E, x)) {
            double up = nextafter(x, HUGE_VAL), down = nextafter(x, -HUGE_VAL);
            if (reads_as(D, -E, up))
                x = up;
            else if (reads_as(D, -E, down))
                x = down;
            else
                return 0;
        }
    }
    *out = neg ? -x : x;
    return 1;
}

static void init_fast_floats(void) {
    POW5[0] = 1;
    for (int i = 1; i < 31; i++)
        POW5[i] = POW5[i - 1] * 5;
}
#else
static int fast_repr(char *out, double x) { (void)out; (void)x; return 0; }
static int fast_strtod(const unsigned char *t, Py_ssize_t len, double *out) { (void)t; (void)len; (void)out; return 0; }
static void init_fast_floats(void) {}
#endif

/* float.__repr__ */
static int put_float(Buf *b, double x) {
    char fast[40];
    int n = fast_repr(fast, x);
    if (n > 0)
        return put(b, fast, n);
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL)
        return -1;
    int rc = put(b, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return rc;
}

/* int.__repr__ of an exact int (the Python repr for big ones: it may raise, as int.__repr__ would) */
static int put_int(Buf *b, PyObject *v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (!overflow) {
        char tmp[32];
        int len = snprintf(tmp, sizeof tmp, "%lld", x);
        return put(b, tmp, len);
    }
    PyObject *r = PyObject_Repr(v);
    if (r == NULL)
        return -1;
    int rc = PyUnicode_IS_ASCII(r) ? put_ascii(b, r) : (PyErr_SetString(PyExc_ValueError, "int repr"), -1);
    Py_DECREF(r);
    return rc;
}


static PyObject *buf_str(Buf *b) {
    PyObject *out = PyUnicode_New(b->n, 127);
    if (out != NULL)
        memcpy(PyUnicode_1BYTE_DATA(out), b->p, (size_t)b->n);
    return out;
}

/* fast_path._rel_text: a relative error as text ("N/A", "0.0%", "12.5%" or "0.012346%"). */
static int put_rel(Buf *b, double diff, double y) {
    if (y == 0)
        return PUT_LIT(b, "N/A");
    if (diff == 0)
        return PUT_LIT(b, "0.0%");
    double v = fabs(diff / y) * 100;
    /* float.is_integer() -> float.__repr__, else "%.6f" (which is PyOS_double_to_string(v, 'f', 6, 0)) */
    if (isfinite(v) && floor(v) == v)
        return put_float(b, v) < 0 ? -1 : PUT_LIT(b, "%");
    char *t = PyOS_double_to_string(v, 'f', 6, 0, NULL);
    if (t == NULL)
        return -1;
    int rc = put(b, t, (Py_ssize_t)strlen(t));
    PyMem_Free(t);
    return rc < 0 ? -1 : PUT_LIT(b, "%");
}
