/* A thread that runs syncfs(2) without ever taking the GIL (storage/syncfs_thread.py says why).

   SyncfsThread(fd): a POSIX thread syncing the filesystem of `fd` (the caller keeps `fd` open while the
   thread lives). `request()` asks for a syncfs that starts after the call and returns the request's
   number; a syncfs covers every request made before it started, so requests made while one runs are
   covered together by the next. After each syncfs the thread writes to an eventfd (`fileno()`), which the
   event loop watches; `completed()` drains it and returns (synced, answered, errno): requests up to
   `synced` are durable, those after it up to `answered` failed with `errno`. The first failure is sticky:
   from then on every request is answered at once with it, without another syncfs, because after a failed
   write-back a later syncfs can report success for pages the kernel dropped. `close()` stops the thread
   after the syncfs it is running (requests not yet synced stay unanswered) and joins it. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    int fs_fd;
    int event_fd;
    int started;
    int stopping;
    int error;          /* errno of the first failed syncfs, 0 while none failed */
    long long requested;
    long long synced;   /* every request up to this one is durable */
    long long answered; /* every request up to this one is answered (synced, or failed with `error`) */
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    pthread_t thread;
} SyncfsThread;

static void *run(void *arg) {
    SyncfsThread *self = (SyncfsThread *)arg;
    pthread_mutex_lock(&self->mutex);
    for (;;) {
        while (self->answered >= self->requested && !self->stopping)
            pthread_cond_wait(&self->wake, &self->mutex);
        if (self->stopping)
            break;
        long long target = self->requested;
        int failed = self->error;
        pthread_mutex_unlock(&self->mutex);
        int err = 0;
        if (!failed && syncfs(self->fs_fd) != 0)
            err = errno;
        pthread_mutex_lock(&self->mutex);
        if (err && !self->error)
            self->error = err;
        if (!self->error)
            self->synced = target;
        self->answered = target;
        pthread_mutex_unlock(&self->mutex);
        uint64_t one = 1;
        while (write(self->event_fd, &one, sizeof one) < 0 && errno == EINTR) {
        }
        pthread_mutex_lock(&self->mutex);
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

static int init(SyncfsThread *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", NULL};
    int fd;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "SyncfsThread is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i", kwlist, &fd))
        return -1;
    self->fs_fd = fd;
    self->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->event_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&self->mutex, NULL);
    pthread_cond_init(&self->wake, NULL);
    int rc = pthread_create(&self->thread, NULL, run, self);
    if (rc != 0) {
        pthread_mutex_destroy(&self->mutex);
        pthread_cond_destroy(&self->wake);
        close(self->event_fd);
        self->event_fd = -1;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

static PyObject *request(SyncfsThread *self, PyObject *unused) {
    if (!self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "SyncfsThread is closed");
        return NULL;
    }
    pthread_mutex_lock(&self->mutex);
    long long number = ++self->requested;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->mutex);
    return PyLong_FromLongLong(number);
}

static PyObject *completed(SyncfsThread *self, PyObject *unused) {
    uint64_t count;
    if (self->event_fd >= 0)
        while (read(self->event_fd, &count, sizeof count) < 0 && errno == EINTR) {
        }
    pthread_mutex_lock(&self->mutex);
    long long synced = self->synced, answered = self->answered;
    int error = self->error;
    pthread_mutex_unlock(&self->mutex);
    return Py_BuildValue("(LLi)", synced, answered, error);
}

static PyObject *fileno_(SyncfsThread *self, PyObject *unused) {
    return PyLong_FromLong(self->event_fd);
}

static void stop(SyncfsThread *self) {
    if (!self->started)
        return;
    pthread_mutex_lock(&self->mutex);
    self->stopping = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->mutex);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
    close(self->event_fd);
    self->event_fd = -1;
    pthread_mutex_destroy(&self->mutex);
    pthread_cond_destroy(&self->wake);
}

static PyObject *close_(SyncfsThread *self, PyObject *unused) {
    stop(self);
    Py_RETURN_NONE;
}

static void dealloc(SyncfsThread *self) {
    stop(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *new_(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    SyncfsThread *self = (SyncfsThread *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->fs_fd = -1;
        self->event_fd = -1;
    }
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"request", (PyCFunction)request, METH_NOARGS, "Ask for a syncfs that starts after this call; its number."},
    {"completed", (PyCFunction)completed, METH_NOARGS,
     "Drain the eventfd; (synced, answered, errno): up to `synced` durable, up to `answered` answered."},
    {"fileno", (PyCFunction)fileno_, METH_NOARGS, "The eventfd written after each syncfs."},
    {"close", (PyCFunction)close_, METH_NOARGS, "Stop the thread after its current syncfs and join it."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncfsThreadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "coordinator_server.storage._syncfs_thread.SyncfsThread",
    .tp_basicsize = sizeof(SyncfsThread),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread running syncfs(2) on one filesystem without the GIL.",
    .tp_new = new_,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_methods = methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_syncfs_thread", "syncfs(2) on a thread that never takes the GIL.", -1, NULL,
};

PyMODINIT_FUNC PyInit__syncfs_thread(void) {
    if (PyType_Ready(&SyncfsThreadType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SyncfsThreadType);
    if (PyModule_AddObject(m, "SyncfsThread", (PyObject *)&SyncfsThreadType) < 0) {
        Py_DECREF(&SyncfsThreadType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
