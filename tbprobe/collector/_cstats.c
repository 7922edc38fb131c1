/* One-pass statistics of a contiguous host buffer of float32, float16, bfloat16, int64, int32 or bool values.

   On the CPU a statistics kernel costs a few microseconds of dispatch before it touches the data, and a summary
   needs four of them (aminmax, sum, norm, and a zero count at the step's end). Small tensors are the common case
   in a training step, so the dispatch is most of the collector's cost; one pass here reads each value once and
   returns all seven numbers. The caller (tbprobe/collector/pytorch/stats.py) passes the address of a live,
   contiguous CPU tensor and its element count, and keeps the tensor alive for the call.

   Sums accumulate in float lanes, at most 64 values a lane, within blocks and in double across blocks (integers in double), and
   are rounded to float32 at the end, as torch's float32 results are. The Norm is
   infinite where float32 accumulation overflows (what torch.linalg.vector_norm reports), so a tbprobe dump and
   a reference dump of the same tensor agree. Max/Min are NaN when any value is NaN, as torch.aminmax gives. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <frameobject.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { KIND_F32 = 0, KIND_F16 = 1, KIND_BF16 = 2, KIND_I64 = 3, KIND_I32 = 4, KIND_BOOL = 5 };
/* Above this many elements the pass runs without the GIL, so the writer thread keeps going. */
#define NOGIL_MIN (1 << 16)

static float half_table[65536];

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000 | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {                       /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

typedef struct {
    float max, min;
    double sum, sumsq;
    Py_ssize_t zeros, nans, infs;
} Summary;

/* Values are taken in blocks: within a block, LANES independent float accumulators per quantity (the compiler
   keeps them in vector registers); each block's partial sums are then added in double, so rounding stays at the
   level of a 64-term float sum whatever the tensor's size. `x > m ? x : m` is exactly what the max instruction
   does, and it skips a NaN, which is counted instead. */
#define LANES 8
#define BLOCK 512
#define MAX_BLOCK 4096   /* the AVX-512 block: 64 lanes */

/* NaN and Inf are counted only in blocks that hold one: a finite block's sum is finite and its Max/Min are
   finite, so the common block pays for Max, Min, the two sums and the zero count alone. */
static void count_nonfinite(const float *p, int n, Summary *out) {
    for (int i = 0; i < n; i++) {
        out->nans += (p[i] != p[i]);
        out->infs += (fabsf(p[i]) == INFINITY);
    }
}

/* A block's last values, from i to n, one at a time, summed in double (so a tensor of a few values gets the same
   bits whichever block runs): they start the block's Max, Min and Sum. */
static inline void block_tail(const float *p, int i, int n, float *bmax, float *bmin, double *bsum, Summary *out) {
    float hi = -INFINITY, lo = INFINITY;
    double sum = 0;
    for (; i < n; i++) {
        float v = p[i];
        hi = v > hi ? v : hi;
        lo = v < lo ? v : lo;
        sum += v;
        /* (in double, so that a tensor of a few values gets torch's bits; but a square that float32 rounds to 0,
           as the lanes' and torch's norm do, is 0 here too: counted for the last few values alone, it made an
           all-tiny tensor's Norm depend on its length modulo the lanes) */
        double sq = (double)v * v;
        out->sumsq += sq > 0x1p-150 ? sq : 0.0;
        out->zeros += (v == 0.0f);
    }
    *bmax = hi;
    *bmin = lo;
    *bsum = sum;
}

/* A block's end: its vector lanes (`lanes` of Max, Min and zero count, `sums` of Sum and sum of squares) folded
   into the figures of its tail and then into `out`. The float lanes of the sums are added in double; a lane that
   overflowed is +inf, which is also where a float32 norm overflows. NaN and Inf are counted where the block has
   one. */
static inline void block_end(const float *p, int n, const float *lmx, const float *lmn, const int32_t *lz,
                             int lanes, const float *ls, const float *lq, int sums, float bmax, float bmin,
                             double bsum, Summary *out) {
    for (int j = 0; j < lanes; j++) {
        bmax = lmx[j] > bmax ? lmx[j] : bmax;
        bmin = lmn[j] < bmin ? lmn[j] : bmin;
        out->zeros += lz[j];
    }
    for (int j = 0; j < sums; j++) {
        bsum += ls[j];
        out->sumsq += lq[j];
    }
    out->max = bmax > out->max ? bmax : out->max;
    out->min = bmin < out->min ? bmin : out->min;
    out->sum += bsum;
    if (!(isfinite(bsum) && isfinite(bmax) && isfinite(bmin)))
        count_nonfinite(p, n, out);
}

/* The portable block: GCC/Clang vector types of eight lanes, lowered to pairs of SSE registers. A comparison gives a lane mask of -1/0: the blends below are `x > m ? x : m` per lane (a NaN
   compares false, so it never becomes Max or Min; it is counted instead), and subtracting the mask counts. */
typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));

#define BLEND(mask, a, b) ((v8f)(((v8i)(a) & (mask)) | ((v8i)(b) & ~(mask))))

static void block_f32_generic(const float *p, int n, Summary *out) {
    v8f mx, mn, s = {0}, q = {0}, x;
    v8i z = {0};
    for (int j = 0; j < LANES; j++) {
        mx[j] = -INFINITY;
        mn[j] = INFINITY;
    }
    int i = 0, body = n - n % LANES;
    for (; i < body; i += LANES) {
        memcpy(&x, p + i, sizeof x);
        mx = BLEND(x > mx, x, mx);
        mn = BLEND(x < mn, x, mn);
        s += x;
        q += x * x;
        z -= (x == 0.0f);
    }
    float bmax, bmin;
    double bsum;
    block_tail(p, i, n, &bmax, &bmin, &bsum, out);
    float lmx[LANES], lmn[LANES], ls[LANES], lq[LANES];
    int32_t lz[LANES];
    memcpy(lmx, &mx, sizeof lmx);
    memcpy(lmn, &mn, sizeof lmn);
    memcpy(ls, &s, sizeof ls);
    memcpy(lq, &q, sizeof lq);
    memcpy(lz, &z, sizeof lz);
    block_end(p, n, lmx, lmn, lz, LANES, ls, lq, LANES, bmax, bmin, bsum, out);
}


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_BLOCK 1
/* The AVX2 block: four sets of eight lanes, so that no quantity's chain of dependent vector instructions (a
   maximum or an add waits ~4 cycles for the one before it) limits the pass; the portable block's single set and
   compare-and-blend maximum read ~3 Gfloat/s from cache, this one several times that. `_mm256_max_ps(x, m)`
   is `x > m ? x : m` (the second operand when either is NaN), so a NaN is skipped here too. */
__attribute__((target("avx2,fma")))
static void block_f32_avx2(const float *p, int n, Summary *out) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 mx[4], mn[4], s[4], q[4];
    __m256i z[4];
    for (int k = 0; k < 4; k++) {
        mx[k] = _mm256_set1_ps(-INFINITY);
        mn[k] = _mm256_set1_ps(INFINITY);
        s[k] = q[k] = zero;
        z[k] = _mm256_setzero_si256();
    }
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {   /* unrolled by the compiler: four independent chains */
            __m256 x = _mm256_loadu_ps(p + i + 8 * k);
            mx[k] = _mm256_max_ps(x, mx[k]);
            mn[k] = _mm256_min_ps(x, mn[k]);
            s[k] = _mm256_add_ps(s[k], x);
            q[k] = _mm256_fmadd_ps(x, x, q[k]);
            z[k] = _mm256_sub_epi32(z[k], _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_EQ_OQ)));
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(p + i);
        mx[0] = _mm256_max_ps(x, mx[0]);
        mn[0] = _mm256_min_ps(x, mn[0]);
        s[0] = _mm256_add_ps(s[0], x);
        q[0] = _mm256_fmadd_ps(x, x, q[0]);
        z[0] = _mm256_sub_epi32(z[0], _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_EQ_OQ)));
    }
    float bmax, bmin;
    double bsum;
    block_tail(p, i, n, &bmax, &bmin, &bsum, out);
    float lmx[8], lmn[8], ls[32], lq[32];
    int32_t lz[8];
    _mm256_storeu_ps(lmx, _mm256_max_ps(_mm256_max_ps(mx[0], mx[1]), _mm256_max_ps(mx[2], mx[3])));
    _mm256_storeu_ps(lmn, _mm256_min_ps(_mm256_min_ps(mn[0], mn[1]), _mm256_min_ps(mn[2], mn[3])));
    _mm256_storeu_si256((__m256i *)lz, _mm256_add_epi32(_mm256_add_epi32(z[0], z[1]), _mm256_add_epi32(z[2], z[3])));
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(ls + 8 * k, s[k]);
        _mm256_storeu_ps(lq + 8 * k, q[k]);
    }
    block_end(p, n, lmx, lmn, lz, 8, ls, lq, 32, bmax, bmin, bsum, out);
}

/* The AVX-512 block: the same four chains, sixteen lanes each; a zero is counted by a masked add. */
__attribute__((target("avx512f")))
static void block_f32_avx512(const float *p, int n, Summary *out) {
    const __m512 zero = _mm512_setzero_ps();
    const __m512i one = _mm512_set1_epi32(1);
    __m512 mx[4], mn[4], s[4], q[4];
    __m512i z[4];
    for (int k = 0; k < 4; k++) {
        mx[k] = _mm512_set1_ps(-INFINITY);
        mn[k] = _mm512_set1_ps(INFINITY);
        s[k] = q[k] = zero;
        z[k] = _mm512_setzero_si512();
    }
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 4; k++) {
            __m512 x = _mm512_loadu_ps(p + i + 16 * k);
            mx[k] = _mm512_max_ps(x, mx[k]);
            mn[k] = _mm512_min_ps(x, mn[k]);
            s[k] = _mm512_add_ps(s[k], x);
            q[k] = _mm512_fmadd_ps(x, x, q[k]);
            z[k] = _mm512_mask_add_epi32(z[k], _mm512_cmp_ps_mask(x, zero, _CMP_EQ_OQ), z[k], one);
        }
    }
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(p + i);
        mx[0] = _mm512_max_ps(x, mx[0]);
        mn[0] = _mm512_min_ps(x, mn[0]);
        s[0] = _mm512_add_ps(s[0], x);
        q[0] = _mm512_fmadd_ps(x, x, q[0]);
        z[0] = _mm512_mask_add_epi32(z[0], _mm512_cmp_ps_mask(x, zero, _CMP_EQ_OQ), z[0], one);
    }
    float bmax, bmin;
    double bsum;
    block_tail(p, i, n, &bmax, &bmin, &bsum, out);
    float lmx[16], lmn[16], ls[64], lq[64];
    int32_t lz[16];
    _mm512_storeu_ps(lmx, _mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3])));
    _mm512_storeu_ps(lmn, _mm512_min_ps(_mm512_min_ps(mn[0], mn[1]), _mm512_min_ps(mn[2], mn[3])));
    _mm512_storeu_si512(lz, _mm512_add_epi32(_mm512_add_epi32(z[0], z[1]), _mm512_add_epi32(z[2], z[3])));
    for (int k = 0; k < 4; k++) {
        _mm512_storeu_ps(ls + 16 * k, s[k]);
        _mm512_storeu_ps(lq + 16 * k, q[k]);
    }
    block_end(p, n, lmx, lmn, lz, 16, ls, lq, 64, bmax, bmin, bsum, out);
}
#endif

/* The block in use and its length (each lane sums at most 64 values in float, whichever block it is), chosen
   once at import by pick_block: the widest the CPU runs. _use_block switches it, for the tests of each. */
static void (*block_f32)(const float *, int, Summary *) = block_f32_generic;
static int block_len = BLOCK;
static const char *block_name = "portable";

static int pick_block(const char *name) {
    int best = strcmp(name, "best") == 0;
    if (best || strcmp(name, "portable") == 0) {
        block_f32 = block_f32_generic; block_len = BLOCK; block_name = "portable";
        if (!best)
            return 1;
    }
#ifdef HAVE_AVX2_BLOCK
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = __builtin_cpu_supports("avx512f");
    if (avx2 && (best || strcmp(name, "avx2") == 0)) {
        block_f32 = block_f32_avx2; block_len = 32 * 64; block_name = "avx2";
        if (!best)
            return 1;
    }
    if (avx512 && (best || strcmp(name, "avx512") == 0)) {
        block_f32 = block_f32_avx512; block_len = MAX_BLOCK; block_name = "avx512";
        return 1;
    }
#endif
    return best;
}

/* _use_block(name) -> bool: "portable", "avx2", "avx512" or "best"; False (and unchanged) where the CPU or the
   build has no such block. _block() -> the name of the one in use. */
static PyObject *use_block(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    return PyBool_FromLong(pick_block(name));
}

static PyObject *current_block(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(block_name);
}

static void summary_init(Summary *out) {
    out->max = -INFINITY; out->min = INFINITY; out->sum = 0; out->sumsq = 0;
    out->zeros = 0; out->nans = 0; out->infs = 0;
}

static void summarise_f32(const float *p, Py_ssize_t n, Summary *out) {
    for (Py_ssize_t i = 0; i < n; i += block_len)
        block_f32(p + i, (int)(n - i < block_len ? n - i : block_len), out);
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Half values are widened into a float block first (exact), then summarised as float32. */
static void summarise_half(const uint16_t *p, Py_ssize_t n, int kind, Summary *out) {
    float buf[MAX_BLOCK];
    for (Py_ssize_t i = 0; i < n; i += block_len) {
        int m = (int)(n - i < block_len ? n - i : block_len);
        if (kind == KIND_F16)
            for (int k = 0; k < m; k++) buf[k] = half_table[p[i + k]];
        else
            for (int k = 0; k < m; k++) buf[k] = bf16_to_float(p[i + k]);
        block_f32(buf, m, out);
    }
}

/* A view that is not contiguous (a transposed q/k/v, a slice), of a float kind: its values are gathered, in
   logical order, into one block-sized buffer at a time and summarised there, so the blocks (and so every bit of
   the result) are those of a contiguous copy, without allocating the copy or reading the values twice. Sizes and
   strides (in elements, none negative) are coalesced by the caller; at most MAX_DIMS of them. */
#define MAX_DIMS 16
static void summarise_strided(const char *base, int kind, int ndim, const Py_ssize_t *size, const Py_ssize_t *stride,
                              Py_ssize_t n, Summary *out) {
    float fbuf[MAX_BLOCK];
    uint16_t hbuf[MAX_BLOCK];
    const int esize = kind == KIND_F32 ? 4 : 2;
    char *dst = kind == KIND_F32 ? (char *)fbuf : (char *)hbuf;
    Py_ssize_t idx[MAX_DIMS] = {0};
    const Py_ssize_t inner = size[ndim - 1], istride = stride[ndim - 1];
    const char *run = base;
    int fill = 0;
    for (Py_ssize_t done = 0; done < n; done += inner) {
        for (Py_ssize_t k = 0; k < inner;) {
            Py_ssize_t take = inner - k < block_len - fill ? inner - k : block_len - fill;
            if (istride == 1) {
                memcpy(dst + (size_t)fill * esize, run + k * esize, (size_t)take * esize);
            } else if (esize == 4) {
                for (Py_ssize_t j = 0; j < take; j++)
                    memcpy(fbuf + fill + j, run + (k + j) * istride * 4, 4);
            } else {
                for (Py_ssize_t j = 0; j < take; j++)
                    memcpy(hbuf + fill + j, run + (k + j) * istride * 2, 2);
            }
            fill += (int)take;
            k += take;
            if (fill == block_len) {
                if (kind == KIND_F32)
                    block_f32(fbuf, fill, out);
                else
                    summarise_half(hbuf, fill, kind, out);
                fill = 0;
            }
        }
        for (int a = ndim - 2; a >= 0; a--) {   /* the next run: an odometer over the outer dimensions */
            run += stride[a] * esize;
            if (++idx[a] < size[a])
                break;
            run -= stride[a] * size[a] * esize;
            idx[a] = 0;
        }
    }
    if (fill) {
        if (kind == KIND_F32)
            block_f32(fbuf, fill, out);
        else
            summarise_half(hbuf, fill, kind, out);
    }
}

/* Integer and bool tensors: exact Max/Min (returned as Python ints), Sum and sum of squares in double. */
#define INT_SUMMARY(TYPE)                                                                                 \
    static void summarise_##TYPE(const TYPE *p, Py_ssize_t n, long long *mx, long long *mn, Summary *out) { \
        TYPE hi = p[0], lo = p[0];                                                                        \
        double s = 0, q = 0;                                                                              \
        Py_ssize_t z = 0;                                                                                 \
        for (Py_ssize_t i = 0; i < n; i++) {                                                              \
            TYPE v = p[i];                                                                                \
            hi = v > hi ? v : hi;                                                                         \
            lo = v < lo ? v : lo;                                                                         \
            s += (double)v;                                                                               \
            q += (double)v * (double)v;                                                                   \
            z += (v == 0);                                                                                \
        }                                                                                                 \
        *mx = (long long)hi; *mn = (long long)lo;                                                         \
        out->sum = s; out->sumsq = q; out->zeros = z;                                                     \
    }
INT_SUMMARY(int64_t)
INT_SUMMARY(int32_t)
INT_SUMMARY(uint8_t)

typedef struct {
    PyObject *max, *min;           /* new references */
    double mean, norm;
    Py_ssize_t zeros, nans, infs;
    double max_abs;                /* max(|Max|, |Min|) when both are finite */
    int finite_range, finite_all;  /* Max/Min finite; all four statistics finite */
} Result;

/* The pass over n > 0 values of a known kind at p; 0 on success, -1 with an exception (no memory). */
/* ndim > 0: a float view laid out by size/stride (see summarise_strided) instead of n values in a row. */
static int run_layout(const void *p, Py_ssize_t n, int kind, int ndim, const Py_ssize_t *size,
                      const Py_ssize_t *stride, Result *out) {
    Summary r;
    long long imax = 0, imin = 0;
    int nogil = n >= NOGIL_MIN;
    PyThreadState *ts = nogil ? PyEval_SaveThread() : NULL;
    summary_init(&r);
    if (ndim > 0)
        summarise_strided((const char *)p, kind, ndim, size, stride, n, &r);
    else if (kind == KIND_F32)
        summarise_f32((const float *)p, n, &r);
    else if (kind == KIND_F16 || kind == KIND_BF16)
        summarise_half((const uint16_t *)p, n, (int)kind, &r);
    else if (kind == KIND_I64)
        summarise_int64_t((const int64_t *)p, n, &imax, &imin, &r);
    else if (kind == KIND_I32)
        summarise_int32_t((const int32_t *)p, n, &imax, &imin, &r);
    else
        summarise_uint8_t((const uint8_t *)p, n, &imax, &imin, &r);
    if (nogil)
        PyEval_RestoreThread(ts);
    out->mean = (float)(r.sum / (double)n);
    out->norm = r.sumsq > (double)FLT_MAX ? INFINITY : (float)sqrt(r.sumsq);
    out->zeros = r.zeros;
    out->nans = r.nans;
    out->infs = r.infs;
    double mx, mn;
    if (kind == KIND_BOOL) {
        out->max = PyBool_FromLong((long)imax);
        out->min = PyBool_FromLong((long)imin);
        mx = (double)imax; mn = (double)imin;
    } else if (kind >= KIND_I64) {
        out->max = PyLong_FromLongLong(imax);
        out->min = PyLong_FromLongLong(imin);
        mx = (double)imax; mn = (double)imin;
    } else {
        mx = r.max; mn = r.min;
        if (r.nans)
            mx = mn = out->mean = out->norm = NAN;
        out->max = PyFloat_FromDouble(mx);
        out->min = PyFloat_FromDouble(mn);
    }
    if (out->max == NULL || out->min == NULL) {
        Py_XDECREF(out->max);
        Py_XDECREF(out->min);
        return -1;
    }
    out->finite_range = isfinite(mx) && isfinite(mn);
    out->finite_all = out->finite_range && isfinite(out->mean) && isfinite(out->norm);
    out->max_abs = fabs(mx) > fabs(mn) ? fabs(mx) : fabs(mn);
    return 0;
}

static int run_raw(const void *p, Py_ssize_t n, int kind, Result *out) {
    return run_layout(p, n, kind, 0, NULL, NULL, out);
}

/* A view's sizes and strides (tuples of ints) as summarise_strided takes them: dimensions of size 1 dropped and
   neighbours that continue each other merged. 1 and *ndim set; 0 where the layout is not one it takes (a negative
   stride, too many dimensions); -1 with an exception. */
static int coalesce(PyObject *sizes, PyObject *strides, Py_ssize_t n, int *ndim, Py_ssize_t *size, Py_ssize_t *stride) {
    if (!PyTuple_Check(sizes) || !PyTuple_Check(strides) || PyTuple_GET_SIZE(sizes) != PyTuple_GET_SIZE(strides)) {
        PyErr_SetString(PyExc_TypeError, "summarise_into: sizes and strides are tuples of one length");
        return -1;
    }
    Py_ssize_t total = 1;
    int d = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes); i++) {
        Py_ssize_t sz = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        Py_ssize_t st = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
        if (PyErr_Occurred())
            return -1;
        if (sz < 0 || st < 0)
            return 0;
        total *= sz;
        if (sz == 1)
            continue;
        if (d > 0 && stride[d - 1] == sz * st) {   /* the outer dimension steps over exactly this one */
            size[d - 1] *= sz;
            stride[d - 1] = st;
            continue;
        }
        if (d == MAX_DIMS)
            return 0;
        size[d] = sz;
        stride[d] = st;
        d++;
    }
    if (total != n) {
        PyErr_SetString(PyExc_ValueError, "summarise_into: the sizes do not multiply to the count");
        return -1;
    }
    if (d == 0) {   /* one value */
        size[0] = 1;
        stride[0] = 1;
        d = 1;
    }
    *ndim = d;
    return 1;
}

/* Parses (address, count, kind) from args[0..2] and runs the pass; 0 on success, -1 with an exception. */
static int run(PyObject *const *args, Result *out) {
    unsigned long long address = PyLong_AsUnsignedLongLong(args[0]);
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    long kind = PyLong_AsLong(args[2]);
    if (PyErr_Occurred())
        return -1;
    if (address == 0 || n <= 0 || kind < KIND_F32 || kind > KIND_BOOL) {
        PyErr_SetString(PyExc_ValueError, "summarise_into: needs a non-null address, a positive count and a known kind");
        return -1;
    }
    return run_raw((const void *)(uintptr_t)address, n, (int)kind, out);
}

/* A pass's health figure: max(|Max|, |Min|); -1.0 when Max or Min is NaN/Inf; -2.0 - max(|Max|, |Min|) when only
   Mean or Norm is (an overflow of finite values, whose largest |x| still counts in the step's max_abs: those are the
   values growing towards an overflow, which the health scalar is there to show). */
static double health_of(const Result *r) {
    return !r->finite_range ? -1.0 : !r->finite_all ? -2.0 - r->max_abs : r->max_abs;
}

static PyObject *key_names[7];
static const char *const key_texts[7] = {"Max", "Min", "Mean", "Norm", "zero_count", "nan_count", "inf_count"};

/* summarise_into(item, address, count, kind[, sizes, strides]) -> health: sets the item's seven statistics keys (in the
   reference's order, after the placeholders the caller put there) and returns its health figure (health_of): what
   the step's health and the writer's choice of JSON encoder need, without a Python tuple per tensor. */
static PyObject *summarise_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if ((nargs != 4 && nargs != 6) || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "summarise_into(item: dict, address, count, kind[, sizes, strides])");
        return NULL;
    }
    Result r;
    if (nargs == 6) {
        unsigned long long address = PyLong_AsUnsignedLongLong(args[1]);
        Py_ssize_t n = PyLong_AsSsize_t(args[2]);
        long kind = PyLong_AsLong(args[3]);
        if (PyErr_Occurred())
            return NULL;
        if (address == 0 || n <= 0 || (kind != KIND_F32 && kind != KIND_F16 && kind != KIND_BF16)) {
            PyErr_SetString(PyExc_ValueError, "summarise_into: a view needs a non-null address, a positive count "
                                              "and a float kind");
            return NULL;
        }
        Py_ssize_t size[MAX_DIMS], stride[MAX_DIMS];
        int ndim = 0;
        int ok = coalesce(args[4], args[5], n, &ndim, size, stride);
        if (ok < 0)
            return NULL;
        if (ok == 0)
            Py_RETURN_NONE;   /* a layout it does not take: the caller copies the view */
        if (run_layout((const void *)(uintptr_t)address, n, (int)kind, ndim, size, stride, &r) < 0)
            return NULL;
    } else if (run(args + 1, &r) < 0) {
        return NULL;
    }
    PyObject *values[7] = {r.max, r.min, PyFloat_FromDouble(r.mean), PyFloat_FromDouble(r.norm),
                           PyLong_FromSsize_t(r.zeros), PyLong_FromSsize_t(r.nans), PyLong_FromSsize_t(r.infs)};
    int failed = 0;
    for (int k = 0; k < 7; k++) {
        if (values[k] == NULL || PyDict_SetItem(args[0], key_names[k], values[k]) < 0)
            failed = 1;
        Py_XDECREF(values[k]);
    }
    if (failed)
        return NULL;
    return PyFloat_FromDouble(health_of(&r));
}

#include "_cstats_api.h"
#include "_cstats_items.h"
#include "_cstats_untrack.h"
#include "_cstats_stack.h"

static PyMethodDef methods[] = {
    {"summarise_into", (PyCFunction)(void (*)(void))summarise_into, METH_FASTCALL,
     "summarise_into(item, address, count, kind[, sizes, strides]) -> max(|Max|, |Min|), -1.0 (Max/Min not "
     "finite) or -2.0 - max(|Max|, |Min|) (only Mean or Norm not finite): sets the item's Max, Min, Mean, Norm, zero_count, nan_count and "
     "inf_count. With sizes and strides (in elements), the float view they lay out from address; None, and the item "
     "untouched, for a layout it does not take."},
    {"stack_key", (PyCFunction)(void (*)(void))stack_key, METH_FASTCALL,
     "stack_key(frame, own, prefix, codes) -> (id(code), f_lasti, ...) of the frames from `frame` outwards, "
     "tbprobe's own left out (see _cstats_stack.h)."},
    {"untrack_tree", (PyCFunction)untrack_tree, METH_O,
     "untrack_tree(obj) -> bool: takes a tree of dicts, lists and tuples over atomic values out of the cyclic GC "
     "(bottom-up; False, and left as it was, where something else is inside)."},
    {"_use_block", (PyCFunction)use_block, METH_O,
     "_use_block(name) -> bool: the statistics block \"portable\", \"avx2\", \"avx512\" or \"best\" (for tests)."},
    {"_block", (PyCFunction)current_block, METH_NOARGS, "_block() -> the name of the statistics block in use."},
    {"crc32_at", (PyCFunction)(void (*)(void))crc32_at, METH_FASTCALL,
     "crc32_at(address, nbytes) -> zlib.crc32 of the bytes at a live tensor's address (the GIL released)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cstats",
                                    "One-pass statistics of contiguous host tensors.", -1, methods};

PyMODINIT_FUNC PyInit__cstats(void) {
    pick_block("best");
    for (uint32_t h = 0; h < 65536; h++)
        half_table[h] = half_to_float((uint16_t)h);
    for (int k = 0; k < 7; k++) {
        key_names[k] = PyUnicode_InternFromString(key_texts[k]);
        if (key_names[k] == NULL)
            return NULL;
    }
    crc_init();
    s_co_filename = PyUnicode_InternFromString("co_filename");
    if (s_co_filename == NULL || intern_all() < 0 || PyType_Ready(&HostItemsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HostItemsType);
    if (PyModule_AddObject(m, "HostItems", (PyObject *)&HostItemsType) < 0) {
        Py_DECREF(&HostItemsType);
        Py_DECREF(m);
        return NULL;
    }
    static tbprobe_item_api api = {.item_from_facts = item_from_facts, .item_from_facts_any = item_from_facts_any,
                                   .note = note_from_api};
    PyObject *capsule = PyCapsule_New((void *)&api, TBPROBE_ITEM_API, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_item_api", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
