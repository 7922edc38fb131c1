/* write_files(dirs, files): a step's folders and files, made in one call with the GIL released throughout.

   With async_dump the collector writes each step from a background thread while the training thread runs Python.
   Every file-system call made from Python (os.mkdir, open, write, close, os.replace) gives up the GIL and must win
   it back from the training thread. Measured here, two folders and three small files written from Python beside
   a thread running pure Python cost the writing thread 2.3 ms of CPU, against 0.4 ms with that thread idle. Here
   the whole step is one release: the texts are encoded first (that needs the GIL), then this call makes the
   folders and writes the files.

   A side file whose text is the last step's (stack.json, construct.json, dataflow.json in a steady loop) is a hard
   link to the last step's file. Making a new inode is the costly part of writing a small file: on this machine's
   ext4, 0.08-1.2 ms of CPU each between training steps (it varies by the hour) against 14-33 us for a link
   (bench/writer_files.py, docs/benchmarks.md), and metadata is slower still on the network file systems of
   training clusters.

   dirs:  a tuple of paths, made in order (one that exists already is fine).
   files: a list of (path, data, tmp) or (path, data, None, same), data a bytes object. When tmp is a path the data
          goes there and is renamed onto `path` (a reader never sees a half file); when tmp is None it is written
          in place, as a new file (an old file at `path` is unlinked first: it may be a link to another step's).
          `same` is (source path, st_dev, st_ino, st_size, st_mtime_ns), the identity write_files returned for a
          file holding the same data: `path` becomes a link to it when the source still has that identity, and is
          written otherwise (the source changed or went, or the file system has no hard links).
   Returns, per file, the identity (st_dev, st_ino, st_size, st_mtime_ns) of what now lies at its path.
   Raises OSError (errno and file name set) at the first failure; a temporary file is removed then. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *path, *tmp, *src;
    const char *data;
    Py_ssize_t len;
    PyObject *path_obj, *tmp_obj;   /* borrowed from the argument: for the error's file name */
    struct stat want;               /* the source's identity, when src is set */
    struct stat got;                /* the identity of the file written or linked */
} Job;

/* Writes all of data to a new file at `target` and keeps its identity in *st; 0 or -1 with errno set. `fresh`:
   an old file at `target` is unlinked, never written through (it may be a link to another step's file); the
   unlink is tried only when the file is there, which it is not as a rule. */
static int write_one(const char *target, const char *data, Py_ssize_t len, struct stat *st, int fresh) {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (fresh ? O_EXCL : O_TRUNC);
    int fd = open(target, flags, 0666);
    if (fd < 0 && fresh && errno == EEXIST && unlink(target) == 0)
        fd = open(target, flags, 0666);
    if (fd < 0)
        return -1;
    while (len > 0) {
        ssize_t n = write(fd, data, (size_t)len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        data += n;
        len -= n;
    }
    if (fstat(fd, st) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return close(fd);
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* `path` as a hard link to j->src when the source still is the file it was; 1 when linked. */
static int link_same(Job *j) {
    struct stat now;
    if (stat(j->src, &now) != 0 || !same_file(&now, &j->want))
        return 0;
    if (link(j->src, j->path) != 0) {
        if (errno != EEXIST || unlink(j->path) != 0 || link(j->src, j->path) != 0)
            return 0;
    }
    j->got = now;
    return 1;
}

/* (st_dev, st_ino, st_size, st_mtime_ns) */
static PyObject *identity(const struct stat *st) {
    long long ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    return Py_BuildValue("(KKLL)", (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
                         (long long)st->st_size, ns);
}

/* The file-system encoding of a path (str, bytes or os.PathLike), kept alive by `keep`; NULL with an exception. */
static const char *encoded(PyObject *keep, PyObject *path) {
    PyObject *b = NULL;
    if (!PyUnicode_FSConverter(path, &b))
        return NULL;
    int rc = PyList_Append(keep, b);
    Py_DECREF(b);   /* `keep` holds it */
    return rc < 0 ? NULL : PyBytes_AS_STRING(b);
}

static PyObject *write_files(PyObject *mod, PyObject *args) {
    PyObject *dirs, *files;
    if (!PyArg_ParseTuple(args, "O!O!:write_files", &PyTuple_Type, &dirs, &PyList_Type, &files))
        return NULL;
    Py_ssize_t nd = PyTuple_GET_SIZE(dirs), nf = PyList_GET_SIZE(files);
    PyObject *keep = PyList_New(0);   /* the encoded paths, alive until the end */
    const char **dpaths = PyMem_Calloc((size_t)nd + 1, sizeof(char *));
    Job *jobs = PyMem_Calloc((size_t)nf + 1, sizeof(Job));
    PyObject *result = NULL;
    if (keep == NULL || dpaths == NULL || jobs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        if ((dpaths[i] = encoded(keep, PyTuple_GET_ITEM(dirs, i))) == NULL)
            goto done;
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *f = PyList_GET_ITEM(files, i), *path, *data, *tmp;
        Py_ssize_t fn = PyTuple_Check(f) ? PyTuple_GET_SIZE(f) : 0;
        if ((fn != 3 && fn != 4) || !PyBytes_Check(PyTuple_GET_ITEM(f, 1)) ||
            (fn == 4 && PyTuple_GET_ITEM(f, 2) != Py_None)) {
            PyErr_SetString(PyExc_TypeError,
                            "write_files: each file is (path, bytes, tmp path or None) or (path, bytes, None, same)");
            goto done;
        }
        if (fn == 4) {
            PyObject *same = PyTuple_GET_ITEM(f, 3), *src;
            unsigned long long dev, ino;
            long long size, ns;
            if (!PyArg_ParseTuple(same, "OKKLL:write_files same", &src, &dev, &ino, &size, &ns))
                goto done;
            if ((jobs[i].src = encoded(keep, src)) == NULL)
                goto done;
            jobs[i].want.st_dev = (dev_t)dev;
            jobs[i].want.st_ino = (ino_t)ino;
            jobs[i].want.st_size = (off_t)size;
            jobs[i].want.st_mtim.tv_sec = (time_t)(ns / 1000000000LL);
            jobs[i].want.st_mtim.tv_nsec = (long)(ns % 1000000000LL);
        }
        path = PyTuple_GET_ITEM(f, 0);
        data = PyTuple_GET_ITEM(f, 1);
        tmp = PyTuple_GET_ITEM(f, 2);
        if ((jobs[i].path = encoded(keep, path)) == NULL)
            goto done;
        jobs[i].path_obj = path;
        if (tmp != Py_None) {
            if ((jobs[i].tmp = encoded(keep, tmp)) == NULL)
                goto done;
            jobs[i].tmp_obj = tmp;
        }
        jobs[i].data = PyBytes_AS_STRING(data);   /* the list holds the bytes object */
        jobs[i].len = PyBytes_GET_SIZE(data);
    }
    int err = 0;
    PyObject *failed = NULL;   /* the path the error is about (borrowed) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nd && !err; i++) {
        if (mkdir(dpaths[i], 0777) != 0 && errno != EEXIST) {
            err = errno;
            failed = PyTuple_GET_ITEM(dirs, i);
        }
    }
    for (Py_ssize_t i = 0; i < nf && !err; i++) {
        Job *j = &jobs[i];
        if (j->src && link_same(j))
            continue;
        const char *target = j->tmp ? j->tmp : j->path;
        if (write_one(target, j->data, j->len, &j->got, j->tmp == NULL) != 0) {
            err = errno;
            failed = j->tmp ? j->tmp_obj : j->path_obj;
            if (j->tmp)
                unlink(j->tmp);
        } else if (j->tmp && rename(j->tmp, j->path) != 0) {
            err = errno;
            failed = j->path_obj;
            unlink(j->tmp);
        }
    }
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, failed);
        goto done;
    }
    if ((result = PyList_New(nf)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *id = identity(&jobs[i].got);
        if (id == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, id);
    }
done:
    PyMem_Free(dpaths);
    PyMem_Free(jobs);
    Py_XDECREF(keep);
    return result;
}

/* TensorBoard's event records carry masked CRC-32Cs (the TFRecord framing). TensorBoard's own RecordWriter computes
   them in pure Python, two thirds of a health event's cost (events.py); here by table, eight bytes a round, or by
   the SSE4.2 instruction where the processor has it. */
static uint32_t crc32c_table[8][256];

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^ crc32c_table[0][crc32c_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c_soft(uint32_t crc, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;   /* (little-endian: the x86-64 and arm64 this builds for) */
        crc = crc32c_table[7][v & 0xFF] ^ crc32c_table[6][(v >> 8) & 0xFF] ^ crc32c_table[5][(v >> 16) & 0xFF] ^
              crc32c_table[4][(v >> 24) & 0xFF] ^ crc32c_table[3][(v >> 32) & 0xFF] ^
              crc32c_table[2][(v >> 40) & 0xFF] ^ crc32c_table[1][(v >> 48) & 0xFF] ^ crc32c_table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#endif

static uint32_t (*crc32c_impl)(uint32_t, const unsigned char *, size_t) = crc32c_soft;

static PyObject *masked_crc32c(PyObject *mod, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) != 0)
        return NULL;
    uint32_t crc = ~crc32c_impl(~0u, (const unsigned char *)b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong((((crc >> 15) | (crc << 17)) + 0xA282EAD8u) & 0xFFFFFFFFu);
}

/* crc32c_path("table"|"sse4.2"|None) -> the path in use before: for the tests, which check both. */
static PyObject *crc32c_path(PyObject *mod, PyObject *arg) {
    const char *before = crc32c_impl == crc32c_soft ? "table" : "sse4.2";
    if (arg != Py_None) {
        const char *want = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
        if (want && strcmp(want, "table") == 0) {
            crc32c_impl = crc32c_soft;
#if defined(__x86_64__)
        } else if (want && strcmp(want, "sse4.2") == 0 && __builtin_cpu_supports("sse4.2")) {
            crc32c_impl = crc32c_sse42;
#endif
        } else {
            PyErr_SetString(PyExc_ValueError, "crc32c_path: 'table', or 'sse4.2' where the processor has it");
            return NULL;
        }
    }
    return PyUnicode_FromString(before);
}

static PyMethodDef methods[] = {
    {"crc32c_path", crc32c_path, METH_O, "crc32c_path(name or None) -> the CRC-32C path in use before."},
    {"masked_crc32c", masked_crc32c, METH_O,
     "masked_crc32c(bytes) -> int: the masked CRC-32C of TFRecord framing (TensorBoard's masked_crc32c)."},
    {"write_files", write_files, METH_VARARGS,
     "write_files(dirs, files) -> identities: makes the folders, then writes or links each file, the GIL "
     "released; OSError at the first failure."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cwrite",
                                    "A step's files written in one call without the GIL.", -1, methods};

PyMODINIT_FUNC PyInit__cwrite(void) {
    crc32c_init();
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        crc32c_impl = crc32c_sse42;
#endif
    return PyModule_Create(&module);
}
