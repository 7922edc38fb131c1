/* write_files(dirs, files): a step's folders and files, made in one call with the GIL released throughout.

   With async_dump the collector writes each step from a background thread while the training thread runs Python.
   Every file-system call made from Python (os.mkdir, open, write, close, os.replace) gives up the GIL and must win
   it back from the training thread. Measured here, two folders and three small files written from Python beside
   a thread running pure Python cost the writing thread 2.3 ms of CPU, against 0.4 ms with that thread idle. Here
   the whole step is one release: the texts are encoded first (that needs the GIL), then this call makes the
   folders and writes the files.

   dirs:  a tuple of paths, made in order (one that exists already is fine).
   files: a list of (path, data, tmp) with data a bytes object; when tmp is a path the data goes there and is
          renamed onto `path` (a reader never sees a half file), when tmp is None it is written in place.
   Raises OSError (errno and file name set) at the first failure; a temporary file is removed then. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *path, *tmp;
    const char *data;
    Py_ssize_t len;
    PyObject *path_obj, *tmp_obj;   /* borrowed from the argument: for the error's file name */
} Job;

/* Writes all of data to a new file at `target`; 0 or -1 with errno set. */
static int write_one(const char *target, const char *data, Py_ssize_t len) {
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
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
    return close(fd);
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
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 3 || !PyBytes_Check(PyTuple_GET_ITEM(f, 1))) {
            PyErr_SetString(PyExc_TypeError, "write_files: each file is (path, bytes, tmp path or None)");
            goto done;
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
        const char *target = j->tmp ? j->tmp : j->path;
        if (write_one(target, j->data, j->len) != 0) {
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
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(dpaths);
    PyMem_Free(jobs);
    Py_XDECREF(keep);
    return result;
}

static PyMethodDef methods[] = {
    {"write_files", write_files, METH_VARARGS,
     "write_files(dirs, files) -> None: makes the folders, then writes each (path, bytes, tmp or None), the GIL "
     "released; OSError at the first failure."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cwrite",
                                    "A step's files written in one call without the GIL.", -1, methods};

PyMODINIT_FUNC PyInit__cwrite(void) {
    return PyModule_Create(&module);
}
