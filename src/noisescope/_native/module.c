/* noisescope._native: the thin binding between Python and the C core.
 *
 * It checks arguments, borrows caller-provided 64-bit buffers through the
 * buffer protocol (numpy arrays), releases the GIL for the run and reports
 * scalar results as dicts. All policy lives in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "coverage.h"
#include "histogram.h"
#include "median.h"
#include "pages.h"
#include "predict.h"
#include "probes.h"
#include "replay.h"

#if NS_HAVE_TSC
#include <cpuid.h>
#endif

/* Buffers borrowed for the duration of one call. */
struct borrowed {
    Py_buffer *views;
    size_t used, capacity;
};

/* Releases the buffers, not the array of views (it may be on the stack). */
static void borrowed_release_views(struct borrowed *b)
{
    for (size_t i = 0; i < b->used; i++)
        PyBuffer_Release(&b->views[i]);
}

static void borrowed_release(struct borrowed *b)
{
    borrowed_release_views(b);
    PyMem_Free(b->views);
}

static int get_u64(PyObject *dict, const char *key, uint64_t *out)
{
    PyObject *value = PyDict_GetItemString(dict, key);
    if (value == NULL) {
        PyErr_Format(PyExc_KeyError, "native run: missing '%s'", key);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static int get_int(PyObject *dict, const char *key, int *out)
{
    uint64_t v;
    if (get_u64(dict, key, &v) < 0)
        return -1;
    if (v > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "native run: '%s' out of range", key);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Borrows a C-contiguous buffer of 8-byte items whose format is one of `formats`
 * (flags: PyBUF_WRITABLE or 0); `what` names them in the error. */
static int borrow_items(PyObject *value, const char *name, int flags, struct borrowed *b,
                        struct ns_series *out, const char *formats, const char *what)
{
    if (b->used == b->capacity) {
        PyErr_SetString(PyExc_RuntimeError, "native run: too many buffers");
        return -1;
    }
    Py_buffer *view = &b->views[b->used];
    if (PyObject_GetBuffer(value, view, flags | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    b->used++;
    if (view->itemsize != 8 || view->format == NULL || view->format[0] == '\0' ||
        strchr(formats, view->format[0]) == NULL) {
        PyErr_Format(PyExc_TypeError, "native run: buffer '%s' must hold %s", name, what);
        return -1;
    }
    out->data = view->buf;
    out->capacity = (size_t)(view->len / 8);
    return 0;
}

/* Borrows a C-contiguous buffer of 8-byte integers (flags: PyBUF_WRITABLE or 0). */
static int borrow_buffer(PyObject *value, const char *name, int flags, struct borrowed *b,
                         struct ns_series *out)
{
    return borrow_items(value, name, flags, b, out, "qQlL", "64-bit integers");
}

/* Borrows a writable, C-contiguous buffer of 8-byte integers. */
static int borrow_series(PyObject *value, const char *name, struct borrowed *b,
                         struct ns_series *out)
{
    return borrow_buffer(value, name, PyBUF_WRITABLE, b, out);
}

static int get_series(PyObject *dict, const char *key, struct borrowed *b,
                      struct ns_series *out)
{
    PyObject *value = PyDict_GetItemString(dict, key);
    if (value == NULL) {
        PyErr_Format(PyExc_KeyError, "native run: missing buffer '%s'", key);
        return -1;
    }
    return borrow_series(value, key, b, out);
}

static int parse_injection(PyObject *dict, struct borrowed *b, struct ns_injection *inj)
{
    memset(inj, 0, sizeof *inj);
    if (get_u64(dict, "period_ns", &inj->period_ns) < 0 ||
        get_u64(dict, "length_ticks", &inj->length) < 0 ||
        get_series(dict, "start", b, &inj->start) < 0 || get_series(dict, "end", b, &inj->end) < 0)
        return -1;
    if (inj->period_ns == 0) {
        PyErr_SetString(PyExc_ValueError, "native run: injection period must be > 0");
        return -1;
    }
    if (inj->start.capacity != inj->end.capacity) {
        PyErr_SetString(PyExc_ValueError, "native run: injection buffers differ in length");
        return -1;
    }
    return 0;
}

/* Borrows the two buffers of a thread's ring (of the same length). */
static int get_ring(PyObject *dict, const char *first, const char *second, struct borrowed *b,
                    struct ns_ring *ring)
{
    if (get_series(dict, first, b, &ring->first) < 0 ||
        get_series(dict, second, b, &ring->second) < 0)
        return -1;
    if (ring->first.capacity != ring->second.capacity) {
        PyErr_Format(PyExc_ValueError, "native run: buffers '%s' and '%s' differ in length",
                     first, second);
        return -1;
    }
    return 0;
}

static int parse_probe(enum ns_probe_kind kind, PyObject *dict, struct borrowed *b,
                       struct ns_thread *t)
{
    switch (kind) {
    case NS_PROBE_DETOUR: {
        struct ns_detour *d = &t->probe.detour;
        struct ns_series histogram;
        if (get_u64(dict, "threshold_ticks", &d->threshold) < 0 ||
            get_u64(dict, "hourglass_ticks", &d->hourglass_cut) < 0 ||
            get_ring(dict, "start", "length", b, &d->samples) < 0 ||
            get_series(dict, "histogram", b, &histogram) < 0)
            return -1;
        if (histogram.capacity != NS_HIST_BINS) {
            PyErr_SetString(PyExc_ValueError, "native run: bad detour buffers");
            return -1;
        }
        /* The loop only counts gaps below the histogram floor (detour.c): a
         * threshold or Hourglass cut under it would silently miss gaps. */
        if (d->threshold < NS_HIST_FLOOR || d->hourglass_cut < NS_HIST_FLOOR - 1) {
            PyErr_Format(PyExc_ValueError,
                         "native run: threshold_ticks must be at least %u and hourglass_ticks "
                         "at least %u (the loop records no shorter gap)",
                         NS_HIST_FLOOR, NS_HIST_FLOOR - 1);
            return -1;
        }
        d->histogram = histogram.data;
        return 0;
    }
    case NS_PROBE_FTQ: {
        struct ns_ftq *f = &t->probe.ftq;
        if (get_u64(dict, "quantum_ticks", &f->quantum) < 0 ||
            get_u64(dict, "unit_iters", &f->unit_iters) < 0 ||
            get_ring(dict, "start", "work", b, &f->samples) < 0)
            return -1;
        if (f->quantum == 0) {
            PyErr_SetString(PyExc_ValueError, "native run: bad FTQ quantum");
            return -1;
        }
        return 0;
    }
    case NS_PROBE_FWQ: {
        struct ns_fwq *f = &t->probe.fwq;
        if (get_u64(dict, "work_units", &f->work_units) < 0 ||
            get_u64(dict, "unit_iters", &f->unit_iters) < 0 ||
            get_ring(dict, "start", "duration", b, &f->samples) < 0)
            return -1;
        return 0;
    }
    case NS_PROBE_TIMERLAT: {
        struct ns_timerlat *tl = &t->probe.timerlat;
        struct ns_series histogram;
        if (get_u64(dict, "interval_ns", &tl->interval_ns) < 0 ||
            get_series(dict, "histogram", b, &histogram) < 0 ||
            get_ring(dict, "latency", "wakeup", b, &tl->series) < 0)
            return -1;
        if (tl->interval_ns == 0) {
            PyErr_SetString(PyExc_ValueError, "native run: bad timerlat interval");
            return -1;
        }
        tl->histogram = histogram.data;
        tl->histogram_buckets = histogram.capacity;
        return 0;
    }
    case NS_PROBE_IDLE:
        return 0;
    }
    return 0;
}

static int parse_kind(const char *name, enum ns_probe_kind *kind)
{
    static const struct {
        const char *name;
        enum ns_probe_kind kind;
    } kinds[] = {{"detour", NS_PROBE_DETOUR},
                 {"ftq", NS_PROBE_FTQ},
                 {"fwq", NS_PROBE_FWQ},
                 {"timerlat", NS_PROBE_TIMERLAT},
                 {"idle", NS_PROBE_IDLE}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(name, kinds[i].name) == 0) {
            *kind = kinds[i].kind;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "native run: unknown probe '%s'", name);
    return -1;
}

#define SET_ITEM(dict, key, object)                                                    \
    do {                                                                               \
        PyObject *item_ = (object);                                                    \
        if (item_ == NULL || PyDict_SetItemString((dict), (key), item_) < 0) {         \
            Py_XDECREF(item_);                                                         \
            Py_DECREF(dict);                                                           \
            return NULL;                                                               \
        }                                                                              \
        Py_DECREF(item_);                                                              \
    } while (0)
#define SET_U64(dict, key, value) SET_ITEM(dict, key, PyLong_FromUnsignedLongLong(value))

static PyObject *error_fields(PyObject *dict, int error, const char *stage)
{
    SET_ITEM(dict, "error", PyLong_FromLong(error));
    SET_ITEM(dict, "error_stage", stage ? PyUnicode_FromString(stage) : Py_NewRef(Py_None));
    return dict;
}

static PyObject *injection_result(const struct ns_injection *inj)
{
    PyObject *r = PyDict_New();
    if (r == NULL)
        return NULL;
    SET_U64(r, "stored", inj->stored);
    SET_U64(r, "overflow", inj->overflow);
    SET_U64(r, "coalesced", inj->coalesced);
    SET_ITEM(r, "tid", PyLong_FromLong(inj->tid));
    return error_fields(r, inj->error, inj->error_stage);
}

static PyObject *thread_result(const struct ns_thread *t)
{
    PyObject *r = PyDict_New();
    if (r == NULL)
        return NULL;
    SET_ITEM(r, "cpu", PyLong_FromLong(t->cpu));
    SET_ITEM(r, "tid", PyLong_FromLong(t->tid));
    SET_U64(r, "windows", t->windows_done);
    SET_U64(r, "run_delay_ns", t->run_delay_ns);
    SET_U64(r, "involuntary_switches", t->involuntary_switches);
    SET_U64(r, "minor_faults", t->minor_faults);
    SET_U64(r, "major_faults", t->major_faults);
    const struct ns_ring *ring = ns_thread_ring((struct ns_thread *)t);
    if (ring != NULL) {
        SET_U64(r, "stored", ring->written);
        SET_U64(r, "overflow", ring->dropped);
        /* the stored pairs with none missing among them (later ones came after a gap) */
        SET_U64(r, "stored_before_loss", ring->dropped ? ring->written_before_drop : ring->written);
    }
    switch (t->kind) {
    case NS_PROBE_DETOUR:
        SET_U64(r, "detours", t->probe.detour.detours);
        SET_U64(r, "lost_ticks", t->probe.detour.lost_ticks);
        SET_U64(r, "max_gap_ticks", t->probe.detour.max_gap);
        SET_U64(r, "resolution_ticks", t->probe.detour.resolution);
        SET_U64(r, "hourglass_gaps", t->probe.detour.hourglass_gaps);
        SET_U64(r, "clock_backwards", t->probe.detour.clock_backwards);
        break;
    case NS_PROBE_FTQ:
    case NS_PROBE_FWQ:
        break;
    case NS_PROBE_TIMERLAT: {
        const struct ns_timerlat *tl = &t->probe.timerlat;
        SET_U64(r, "samples", tl->samples);
        SET_U64(r, "missed", tl->missed);
        SET_U64(r, "histogram_overflow", tl->histogram_overflow);
        SET_U64(r, "min_ns", tl->samples ? tl->min_ns : 0);
        SET_U64(r, "max_ns", tl->max_ns);
        SET_U64(r, "sum_ns", tl->sum_ns);
        break;
    }
    case NS_PROBE_IDLE:
        break;
    }
    if (t->signal_injection != NULL) {
        PyObject *inj = injection_result(t->signal_injection);
        SET_ITEM(r, "injection", inj);
    }
    return error_fields(r, t->error, t->error_stage);
}

static PyObject *build_results(const struct ns_thread *threads, Py_ssize_t nthreads,
                               const struct ns_injection *injectors, Py_ssize_t ninjectors)
{
    PyObject *samplers = PyList_New(nthreads);
    PyObject *injected = PyList_New(ninjectors);
    if (samplers == NULL || injected == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < nthreads; i++) {
        PyObject *r = thread_result(&threads[i]);
        if (r == NULL)
            goto fail;
        PyList_SET_ITEM(samplers, i, r);
    }
    for (Py_ssize_t i = 0; i < ninjectors; i++) {
        PyObject *r = injection_result(&injectors[i]);
        if (r == NULL)
            goto fail;
        PyList_SET_ITEM(injected, i, r);
    }
    return Py_BuildValue("(NN)", samplers, injected);
fail:
    Py_XDECREF(samplers);
    Py_XDECREF(injected);
    return NULL;
}

PyDoc_STRVAR(run_doc,
             "run(probe, threads, injectors, schedule, control) -> (sampler results, injector "
             "results)\n\nRuns one probe on every CPU in `threads` (list of dicts) with the "
             "GIL released.\n`control` is an int64 array of (1 + threads) * CONTROL_STRIDE slots: the "
             "stop flag first, then per thread its progress (windows done), the samples its ring "
             "has published and those the caller has taken (SLOT_PROGRESS, SLOT_PUBLISHED, SLOT_TAKEN).");

static PyObject *native_run(PyObject *self, PyObject *args)
{
    (void)self;
    const char *probe;
    PyObject *thread_specs, *injector_specs, *schedule_spec, *control_obj;
    if (!PyArg_ParseTuple(args, "sO!O!O!O", &probe, &PyList_Type, &thread_specs, &PyList_Type,
                          &injector_specs, &PyDict_Type, &schedule_spec, &control_obj))
        return NULL;
    enum ns_probe_kind kind;
    if (parse_kind(probe, &kind) < 0)
        return NULL;

    Py_ssize_t nthreads = PyList_GET_SIZE(thread_specs);
    Py_ssize_t ninjectors = PyList_GET_SIZE(injector_specs);
    struct ns_thread *threads = PyMem_Calloc((size_t)nthreads + 1, sizeof *threads);
    struct ns_injection *signal_injections = PyMem_Calloc((size_t)nthreads + 1, sizeof *signal_injections);
    struct ns_injection *injectors = PyMem_Calloc((size_t)ninjectors + 1, sizeof *injectors);
    struct borrowed b = {.capacity = (size_t)(nthreads * 9 + ninjectors * 2 + 1)};
    b.views = PyMem_Calloc(b.capacity, sizeof *b.views);
    PyObject *result = NULL;
    if (threads == NULL || signal_injections == NULL || injectors == NULL || b.views == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    struct ns_schedule schedule;
    if (get_u64(schedule_spec, "start_mono_ns", &schedule.start_mono_ns) < 0 ||
        get_u64(schedule_spec, "runtime_ns", &schedule.runtime_ns) < 0 ||
        get_u64(schedule_spec, "period_ns", &schedule.period_ns) < 0 ||
        get_u64(schedule_spec, "last_runtime_ns", &schedule.last_runtime_ns) < 0 ||
        get_u64(schedule_spec, "windows", &schedule.windows) < 0)
        goto done;
    PyObject *rate = PyDict_GetItemString(schedule_spec, "ticks_per_ns");
    schedule.ticks_per_ns = rate ? PyFloat_AsDouble(rate) : -1.0;
    if (PyErr_Occurred())
        goto done;
    if (schedule.ticks_per_ns <= 0 || schedule.period_ns == 0 || schedule.runtime_ns == 0 ||
        schedule.runtime_ns > schedule.period_ns) {
        PyErr_SetString(PyExc_ValueError, "native run: bad schedule");
        goto done;
    }

    for (Py_ssize_t i = 0; i < nthreads; i++) {
        PyObject *spec = PyList_GET_ITEM(thread_specs, i);
        struct ns_thread *t = &threads[i];
        if (!PyDict_Check(spec)) {
            PyErr_SetString(PyExc_TypeError, "native run: thread specs must be dicts");
            goto done;
        }
        t->kind = kind;
        if (get_int(spec, "cpu", &t->cpu) < 0 || get_int(spec, "priority", &t->priority) < 0 ||
            get_series(spec, "window_start", &b, &t->window_start) < 0 ||
            get_series(spec, "window_end", &b, &t->window_end) < 0 ||
            parse_probe(kind, spec, &b, t) < 0)
            goto done;
        if (t->window_start.capacity != t->window_end.capacity) {
            PyErr_SetString(PyExc_ValueError, "native run: window buffers differ in length");
            goto done;
        }
        PyObject *inject = PyDict_GetItemString(spec, "inject");
        if (inject != NULL && inject != Py_None) {
            if (!PyDict_Check(inject) || parse_injection(inject, &b, &signal_injections[i]) < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "native run: 'inject' must be a dict");
                goto done;
            }
            signal_injections[i].cpu = t->cpu;
            t->signal_injection = &signal_injections[i];
        }
    }
    for (Py_ssize_t i = 0; i < ninjectors; i++) {
        PyObject *spec = PyList_GET_ITEM(injector_specs, i);
        if (!PyDict_Check(spec) || parse_injection(spec, &b, &injectors[i]) < 0 ||
            get_int(spec, "cpu", &injectors[i].cpu) < 0 ||
            get_int(spec, "priority", &injectors[i].priority) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "native run: injector specs must be dicts");
            goto done;
        }
    }

    struct ns_series control;
    if (borrow_series(control_obj, "control", &b, &control) < 0)
        goto done;
    if (control.capacity < ((size_t)nthreads + 1) * NS_CONTROL_STRIDE) {
        PyErr_SetString(PyExc_ValueError,
                        "native run: control needs CONTROL_STRIDE slots per thread, and as many "
                        "before them");
        goto done;
    }
    struct ns_control ctl = {.stop = (volatile int64_t *)control.data,
                             .threads = (volatile int64_t *)control.data + NS_CONTROL_STRIDE};
    for (Py_ssize_t i = 0; i < nthreads; i++) {
        struct ns_ring *ring = ns_thread_ring(&threads[i]);
        if (ring != NULL) {
            ring->published = ctl.threads + i * NS_CONTROL_STRIDE + NS_SLOT_PUBLISHED;
            ring->taken = ctl.threads + i * NS_CONTROL_STRIDE + NS_SLOT_TAKEN;
        }
    }

    int error;
    Py_BEGIN_ALLOW_THREADS
    error = ns_run(threads, (size_t)nthreads, injectors, (size_t)ninjectors, &schedule, &ctl);
    Py_END_ALLOW_THREADS
    if (error != 0) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = build_results(threads, nthreads, injectors, ninjectors);

done:
    borrowed_release(&b);
    PyMem_Free(threads);
    PyMem_Free(signal_injections);
    PyMem_Free(injectors);
    return result;
}

static PyObject *native_ticks(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromUnsignedLongLong(ns_ticks());
}

static PyObject *native_calibrate(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long duration_ns;
    if (!PyArg_ParseTuple(args, "K", &duration_ns))
        return NULL;
    double rate;
    Py_BEGIN_ALLOW_THREADS
    rate = ns_calibrate_ticks_per_ns(duration_ns);
    Py_END_ALLOW_THREADS
    if (rate <= 0.0)
        return PyErr_Format(PyExc_RuntimeError,
                            "calibration: the tick counter or CLOCK_MONOTONIC_RAW did not move "
                            "forward over %llu ns",
                            duration_ns);
    return PyFloat_FromDouble(rate);
}

static PyObject *native_loop_resolution(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long duration_ticks;
    if (!PyArg_ParseTuple(args, "K", &duration_ticks))
        return NULL;
    uint64_t best;
    Py_BEGIN_ALLOW_THREADS
    best = ns_loop_resolution_ticks(duration_ticks);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(best);
}

static PyObject *native_min_work(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long units, unit_iters;
    unsigned int repetitions;
    if (!PyArg_ParseTuple(args, "KKI", &units, &unit_iters, &repetitions))
        return NULL;
    uint64_t best;
    Py_BEGIN_ALLOW_THREADS
    best = ns_min_work_ticks(units, unit_iters, repetitions);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(best);
}

static PyObject *native_timed_work(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long units, unit_iters;
    if (!PyArg_ParseTuple(args, "KK", &units, &unit_iters))
        return NULL;
    uint64_t took;
    Py_BEGIN_ALLOW_THREADS
    took = ns_timed_work(units, unit_iters);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(took);
}

static PyObject *native_histogram_lower_bounds(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *bounds = PyTuple_New(NS_HIST_BINS);
    if (bounds == NULL)
        return NULL;
    for (unsigned i = 0; i < NS_HIST_BINS; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(ns_hist_lower(i));
        if (v == NULL) {
            Py_DECREF(bounds);
            return NULL;
        }
        PyTuple_SET_ITEM(bounds, i, v);
    }
    return bounds;
}

static PyObject *native_walk_pages(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data;
    PyObject *offsets_obj, *stamps_obj;
    struct ns_page_layout layout;
    if (!PyArg_ParseTuple(args, "y*(nnnnn)OO", &data, &layout.timestamp_offset,
                          &layout.commit_offset, &layout.commit_size, &layout.data_offset,
                          &layout.page_size, &offsets_obj, &stamps_obj))
        return NULL;
    struct borrowed b = {PyMem_Calloc(2, sizeof(Py_buffer)), 0, 2};
    struct ns_series offsets, stamps;
    PyObject *result = NULL;
    if (b.views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (layout.commit_size != 4 && layout.commit_size != 8) {
        PyErr_SetString(PyExc_ValueError, "walk_pages: the commit word has 4 or 8 bytes");
        goto done;
    }
    if (layout.timestamp_offset + 8 > layout.data_offset ||
        layout.commit_offset + layout.commit_size > layout.data_offset ||
        layout.data_offset > layout.page_size) {
        PyErr_SetString(PyExc_ValueError, "walk_pages: the page header does not fit the page");
        goto done;
    }
    if (borrow_series(offsets_obj, "offsets", &b, &offsets) < 0 ||
        borrow_series(stamps_obj, "stamps", &b, &stamps) < 0)
        goto done;
    size_t capacity = offsets.capacity < stamps.capacity ? offsets.capacity : stamps.capacity;
    size_t found;
    uint64_t missed;
    Py_BEGIN_ALLOW_THREADS
    found = ns_walk_pages(data.buf, (size_t)data.len, &layout, (int64_t *)offsets.data,
                          stamps.data, capacity, &missed);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nK", (Py_ssize_t)found, (unsigned long long)missed);
done:
    borrowed_release(&b);
    PyBuffer_Release(&data);
    return result;
}

/* The records' fields, for trace.events.RawDecoder: see ns_decode_records. */
_Static_assert(sizeof(struct ns_record_format) == (1 + 5 * NS_RECORD_FIELDS) * sizeof(int64_t),
               "a record format is a row of int64");

enum { DECODED_ROWS = 2 + NS_RECORD_FIELDS }; /* stamp, slot, then the fields */

/* A C-contiguous 2-D int64 array of `rows` rows, borrowed: its row length. */
static int borrow_rows(PyObject *value, const char *name, size_t rows, int flags,
                       struct borrowed *b, int64_t **data, size_t *columns)
{
    struct ns_series series;
    if (borrow_buffer(value, name, flags, b, &series) < 0)
        return -1;
    Py_buffer *view = &b->views[b->used - 1];
    if (view->ndim != 2 || (size_t)view->shape[0] != rows) {
        PyErr_Format(PyExc_ValueError, "decode_records: '%s' must have %zu rows", name, rows);
        return -1;
    }
    *data = (int64_t *)series.data;
    *columns = (size_t)view->shape[1];
    return 0;
}

static PyObject *native_decode_records(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, slot_of_id;
    PyObject *offsets_obj, *stamps_obj, *formats_obj, *events_obj, *switches_obj, *keys_obj;
    if (!PyArg_ParseTuple(args, "y*OOy*OOOO", &data, &offsets_obj, &stamps_obj, &slot_of_id,
                          &formats_obj, &events_obj, &switches_obj, &keys_obj))
        return NULL;
    Py_buffer views[6];
    struct borrowed b = {views, 0, 6};
    PyObject *result = NULL;
    struct ns_series offsets, stamps, formats;
    int64_t *decoded[NS_ROLES] = {NULL}, *keys;
    size_t room[NS_ROLES] = {0}, key_room;
    if (slot_of_id.len != 65536 * (Py_ssize_t)sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "decode_records: slot_of_id must hold 65536 int16");
        goto done;
    }
    if (borrow_buffer(offsets_obj, "offsets", 0, &b, &offsets) < 0 ||
        borrow_buffer(stamps_obj, "stamps", 0, &b, &stamps) < 0 ||
        borrow_buffer(formats_obj, "formats", 0, &b, &formats) < 0 ||
        borrow_rows(events_obj, "events", DECODED_ROWS, PyBUF_WRITABLE, &b,
                    &decoded[NS_ROLE_EVENT], &room[NS_ROLE_EVENT]) < 0 ||
        borrow_rows(switches_obj, "switches", DECODED_ROWS, PyBUF_WRITABLE, &b,
                    &decoded[NS_ROLE_SWITCH], &room[NS_ROLE_SWITCH]) < 0 ||
        borrow_rows(keys_obj, "keys", 3, PyBUF_WRITABLE, &b, &keys, &key_room) < 0)
        goto done;
    size_t n = offsets.capacity < stamps.capacity ? offsets.capacity : stamps.capacity;
    size_t n_formats = formats.capacity / (1 + 5 * NS_RECORD_FIELDS);
    if (room[NS_ROLE_EVENT] < n || room[NS_ROLE_SWITCH] < n) {
        PyErr_SetString(PyExc_ValueError, "decode_records: no room for every record");
        goto done;
    }
    const int16_t *slots = slot_of_id.buf;
    for (size_t r = 0; r < n; r++) { /* a payload inside the data (ns_walk_pages gives them) */
        int64_t at = ((const int64_t *)offsets.data)[r];
        if (at < 0 || (size_t)at > (size_t)data.len) {
            PyErr_Format(PyExc_ValueError, "decode_records: offset %zu is outside the data", r);
            goto done;
        }
    }
    for (size_t k = 0; k < 65536; k++) {
        if (slots[k] >= (int16_t)n_formats && slots[k] >= 0) {
            PyErr_SetString(PyExc_ValueError, "decode_records: a slot has no format");
            goto done;
        }
    }
    struct ns_decoded out[NS_ROLES] = {{0}};
    for (int role = NS_ROLE_EVENT; role < NS_ROLES; role++) {
        int64_t *rows = decoded[role];
        out[role].stamp = (uint64_t *)rows;
        out[role].slot = rows + room[role];
        for (int f = 0; f < NS_RECORD_FIELDS; f++)
            out[role].value[f] = rows + (2 + f) * room[role];
    }
    struct ns_record_keys found = {keys, keys + key_room, keys + 2 * key_room, key_room, 0};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = ns_decode_records(data.buf, (size_t)data.len, (const int64_t *)offsets.data,
                               stamps.data, n, slots,
                               (const struct ns_record_format *)formats.data, n_formats, out,
                               &found);
    Py_END_ALLOW_THREADS
    if (status < 0 && found.count == key_room)
        PyErr_SetString(PyExc_ValueError, "decode_records: no room for every key");
    else if (status < 0)
        PyErr_NoMemory();
    else
        result = Py_BuildValue("nnn", (Py_ssize_t)out[NS_ROLE_EVENT].count,
                               (Py_ssize_t)out[NS_ROLE_SWITCH].count, (Py_ssize_t)found.count);
done:
    borrowed_release_views(&b);
    PyBuffer_Release(&data);
    PyBuffer_Release(&slot_of_id);
    return result;
}

static PyObject *native_cpuid(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned int leaf, subleaf = 0;
    if (!PyArg_ParseTuple(args, "I|I", &leaf, &subleaf))
        return NULL;
#if NS_HAVE_TSC
    unsigned int a, b, c, d;
    __cpuid_count(leaf, subleaf, a, b, c, d);
    return Py_BuildValue("(IIII)", a, b, c, d);
#else
    Py_RETURN_NONE;
#endif
}

static PyObject *native_mlockall(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    /* MCL_ONFAULT locks what is touched instead of paging in every mapped
     * library, which would inflate the resident set for nothing. */
#ifdef MCL_ONFAULT
    int flags = MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT;
#else
    int flags = MCL_CURRENT | MCL_FUTURE;
#endif
    return PyLong_FromLong(mlockall(flags) == 0 ? 0 : errno);
}

static PyObject *native_munlockall(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(munlockall() == 0 ? 0 : errno);
}

static PyObject *native_injection_signal(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(ns_injection_signal());
}

/* -- the prediction engine (analysis/predict): tuples of arrays, see predict.h -- */

/* A borrowed int64 array of at least `least` items (NULL for None if optional),
 * writable unless flags is 0. */
static int borrow_int64_as(PyObject *value, const char *name, int optional, size_t least,
                           int flags, struct borrowed *b, int64_t **out)
{
    if (optional && value == Py_None) {
        *out = NULL;
        return 0;
    }
    struct ns_series series;
    if (borrow_buffer(value, name, flags, b, &series) < 0)
        return -1;
    if (series.capacity < least) {
        PyErr_Format(PyExc_ValueError, "native: array '%s' holds %zu items, needs %zu", name,
                     series.capacity, least);
        return -1;
    }
    *out = (int64_t *)series.data;
    return 0;
}

static int borrow_int64(PyObject *value, const char *name, int optional, size_t least,
                        struct borrowed *b, int64_t **out)
{
    return borrow_int64_as(value, name, optional, least, PyBUF_WRITABLE, b, out);
}

/* (starts, ends, cumulative, first, bucket_shift, max_steps, origin, span, total) */
static int parse_axis(PyObject *spec, struct borrowed *b, struct ns_trace_axis *a)
{
    PyObject *starts, *ends, *cumulative, *first, *origin, *span, *total;
    if (!PyArg_ParseTuple(spec, "OOOOiiOOO;predict: bad trace axis", &starts, &ends,
                          &cumulative, &first, &a->bucket_shift, &a->max_steps, &origin, &span,
                          &total))
        return -1;
    int64_t *s, *e, *c, *f, *o, *sp, *t;
    if (borrow_int64(starts, "starts", 0, 1, b, &s) < 0)
        return -1;
    size_t detours = b->views[b->used - 1].len / 8 - 1;
    size_t traces = (size_t)PyObject_Length(span);
    if (borrow_int64(ends, "ends", 0, detours + 1, b, &e) < 0 ||
        borrow_int64(cumulative, "cumulative", 0, detours + 1, b, &c) < 0 ||
        borrow_int64(first, "first", 0, 1, b, &f) < 0 ||
        borrow_int64(origin, "origin", 0, traces, b, &o) < 0 ||
        borrow_int64(span, "span", 0, traces, b, &sp) < 0 ||
        borrow_int64(total, "total", 0, traces, b, &t) < 0)
        return -1;
    if (traces == 0 || a->bucket_shift < 0 || a->bucket_shift > 62 || a->max_steps < 0) {
        PyErr_SetString(PyExc_ValueError, "predict: bad trace axis");
        return -1;
    }
    a->starts = s, a->ends = e, a->cumulative = c, a->first = f;
    a->origin = o, a->span = sp, a->total = t;
    a->detours = (int64_t)detours;
    a->shortest_span = sp[0];
    for (size_t j = 1; j < traces; j++)
        if (sp[j] < a->shortest_span)
            a->shortest_span = sp[j];
    return 0;
}

/* (axis, shift, next_start, trace_of or None) for `procs` processes */
static int parse_replay(PyObject *spec, size_t procs, struct borrowed *b, struct ns_replay *r)
{
    PyObject *axis, *shift, *next_start, *trace_of;
    int64_t *of;
    if (!PyArg_ParseTuple(spec, "O!OOO;predict: bad noise replay", &PyTuple_Type, &axis, &shift,
                          &next_start, &trace_of) ||
        parse_axis(axis, b, &r->axis) < 0 ||
        borrow_int64(shift, "shift", 0, procs, b, &r->shift) < 0 ||
        borrow_int64(next_start, "next_start", 0, procs, b, &r->next_start) < 0 ||
        borrow_int64(trace_of, "trace_of", 1, procs, b, &of) < 0)
        return -1;
    r->trace_of = of;
    return 0;
}

/* (ready, next_send or None, next_receive or None, L, o, g, transfer), replay or None */
static int parse_machine(PyObject *spec, PyObject *noise, struct borrowed *b,
                         struct ns_machine *m, struct ns_replay *replay, int64_t *procs)
{
    PyObject *ready, *next_send, *next_receive;
    if (!PyArg_ParseTuple(spec, "OOOLLLL;predict: bad machine", &ready, &next_send,
                          &next_receive, &m->latency, &m->overhead, &m->gap, &m->transfer) ||
        borrow_int64(ready, "ready", 0, 0, b, &m->ready) < 0)
        return -1;
    size_t count = b->views[b->used - 1].len / 8;
    *procs = (int64_t)count;
    if (borrow_int64(next_send, "next_send", 1, count, b, &m->next_send) < 0 ||
        borrow_int64(next_receive, "next_receive", 1, count, b, &m->next_receive) < 0)
        return -1;
    m->noise = NULL;
    if (noise != Py_None) {
        if (parse_replay(noise, count, b, replay) < 0)
            return -1;
        m->noise = replay;
    }
    return 0;
}

static PyObject *native_predict_windows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *axis_spec, *at_obj, *noise_obj;
    long long busy, span, total;
    int in_progress;
    if (!PyArg_ParseTuple(args, "O!OLLLpO", &PyTuple_Type, &axis_spec, &at_obj, &busy, &span,
                          &total, &in_progress, &noise_obj))
        return NULL;
    Py_buffer views[16];
    struct borrowed b = {views, 0, 16};
    struct ns_trace_axis axis;
    int64_t *at, *noise;
    PyObject *result = NULL;
    if (parse_axis(axis_spec, &b, &axis) < 0 || borrow_int64(at_obj, "at", 0, 0, &b, &at) < 0)
        goto done;
    size_t count = b.views[b.used - 1].len / 8;
    if (borrow_int64(noise_obj, "noise", 0, count, &b, &noise) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    ns_trace_windows(&axis, at, (int64_t)count, busy, span, total, in_progress, noise);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    borrowed_release_views(&b);
    return result;
}

static PyObject *native_predict_finish(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *replay_spec, *start_obj, *end_obj;
    long long first, busy;
    if (!PyArg_ParseTuple(args, "O!OOLL", &PyTuple_Type, &replay_spec, &start_obj, &end_obj,
                          &first, &busy))
        return NULL;
    Py_buffer views[16];
    struct borrowed b = {views, 0, 16};
    struct ns_replay replay;
    int64_t *start, *end;
    PyObject *result = NULL;
    if (borrow_int64(start_obj, "start", 0, 0, &b, &start) < 0)
        goto done;
    size_t count = b.views[b.used - 1].len / 8;
    if (first < 0 || borrow_int64(end_obj, "end", 0, count, &b, &end) < 0 ||
        parse_replay(replay_spec, (size_t)first + count, &b, &replay) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    ns_replay_finish(&replay, start, end, (int64_t)count, first, busy);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    borrowed_release_views(&b);
    return result;
}

static PyObject *native_predict_compute(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *machine_spec, *noise;
    long long length;
    int threads;
    if (!PyArg_ParseTuple(args, "O!OLi", &PyTuple_Type, &machine_spec, &noise, &length, &threads))
        return NULL;
    Py_buffer views[16];
    struct borrowed b = {views, 0, 16};
    struct ns_machine machine;
    struct ns_replay replay;
    int64_t procs;
    PyObject *result = NULL;
    if (parse_machine(machine_spec, noise, &b, &machine, &replay, &procs) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    ns_machine_compute(&machine, procs, length, threads);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    borrowed_release_views(&b);
    return result;
}

static PyObject *native_predict_allreduce(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *machine_spec, *noise;
    long long power, block, group;
    int threads;
    if (!PyArg_ParseTuple(args, "O!OLLLi", &PyTuple_Type, &machine_spec, &noise, &power, &block,
                          &group, &threads))
        return NULL;
    Py_buffer views[16];
    struct borrowed b = {views, 0, 16};
    struct ns_machine machine;
    struct ns_replay replay;
    int64_t procs;
    PyObject *result = NULL;
    if (parse_machine(machine_spec, noise, &b, &machine, &replay, &procs) < 0)
        goto done;
    /* every size a power of two; power within the machine */
    if (power < 1 || power > procs || block < 1 || group < 1 || (power & (power - 1)) ||
        (block & (block - 1)) || (group & (group - 1))) {
        PyErr_SetString(PyExc_ValueError, "predict: allreduce sizes must be powers of two");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ns_allreduce_rounds(&machine, power, block, group, threads);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    borrowed_release_views(&b);
    return result;
}

/* -- the attribution's replays (trace/switches.py, trace/attribute.py), see replay.h -- */

/* The (values, codes) arguments of the functions that number a column's
 * values: values a C-contiguous array of objects (objects != 0) or of
 * fixed-width items, codes an int64 array at least as long. On success the
 * caller releases *values and b. */
static int column_and_codes(PyObject *args, const char *what, int objects, Py_buffer *values,
                            struct borrowed *b, int64_t **codes, size_t *count)
{
    PyObject *values_obj, *codes_obj;
    if (!PyArg_ParseTuple(args, "OO", &values_obj, &codes_obj) ||
        PyObject_GetBuffer(values_obj, values, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    int of_objects = values->format != NULL && strcmp(values->format, "O") == 0 &&
                     values->itemsize == sizeof(PyObject *);
    *count = values->itemsize ? (size_t)values->len / (size_t)values->itemsize : 0;
    if (of_objects != objects) {
        PyErr_Format(PyExc_TypeError, "%s: values must be %s", what,
                     objects ? "an object array" : "fixed-width, not objects");
    } else if (borrow_int64(codes_obj, "codes", 0, *count, b, codes) == 0) {
        return 0;
    }
    borrowed_release_views(b);
    PyBuffer_Release(values);
    return -1;
}

static PyObject *native_dictionary_codes(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer values;
    Py_buffer views[1];
    struct borrowed b = {views, 0, 1};
    int64_t *codes;
    size_t rows;
    if (column_and_codes(args, "dictionary_codes", 1, &values, &b, &codes, &rows) < 0)
        return NULL;
    Py_ssize_t count = (Py_ssize_t)rows;
    PyObject *distinct = PyList_New(0), *ids = PyDict_New();
    if (distinct == NULL || ids == NULL)
        goto fail;
    /* The codes of objects seen lately, by address: a column repeats a few
     * objects (interned strings) and an object is equal to itself. */
    struct {
        PyObject *value;
        Py_ssize_t code;
    } recent[64] = {{NULL, 0}};
    PyObject **items = values.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value = items[i];
        size_t slot = ((uintptr_t)value >> 4) % 64;
        Py_ssize_t code = recent[slot].code;
        if (recent[slot].value != value) {
            PyObject *known = PyDict_GetItemWithError(ids, value);
            if (known != NULL) {
                code = PyLong_AsSsize_t(known);
            } else {
                if (PyErr_Occurred())
                    goto fail;
                code = PyList_GET_SIZE(distinct);
                PyObject *number = PyLong_FromSsize_t(code);
                int failed = number == NULL || PyDict_SetItem(ids, value, number) < 0 ||
                             PyList_Append(distinct, value) < 0;
                Py_XDECREF(number);
                if (failed)
                    goto fail;
            }
            recent[slot].value = value, recent[slot].code = code;
        }
        codes[i] = code;
    }
    Py_DECREF(ids);
    borrowed_release_views(&b);
    PyBuffer_Release(&values);
    return distinct;
fail:
    Py_XDECREF(ids);
    Py_XDECREF(distinct);
    borrowed_release_views(&b);
    PyBuffer_Release(&values);
    return NULL;
}

/* factorize(values, codes) -> first: each fixed-width value's code (its
 * distinct value's place in order of first appearance) into codes (int64),
 * and the index of each distinct value's first appearance. Equal means equal
 * bytes. A hash table of first indices, grown at half full; a value equal to
 * the one before skips it (a trace repeats its names in runs). */
static uint64_t value_hash(const unsigned char *value, size_t width)
{
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < width; i++)
        hash = (hash ^ value[i]) * 1099511628211ULL;
    return hash ^ (hash >> 29);
}

static PyObject *native_factorize(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer values;
    Py_buffer views[1];
    struct borrowed b = {views, 0, 1};
    int64_t *codes;
    size_t count;
    if (column_and_codes(args, "factorize", 0, &values, &b, &codes, &count) < 0)
        return NULL;
    PyObject *result = NULL;
    int64_t *first = NULL, *slots = NULL;
    size_t width = (size_t)values.itemsize;
    size_t capacity = 64, distinct = 0;
    first = PyMem_Malloc(capacity / 2 * sizeof *first);
    slots = PyMem_Malloc(capacity * sizeof *slots);
    if (first == NULL || slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slots, 0xff, capacity * sizeof *slots); /* -1: empty */
    const unsigned char *data = values.buf;
    for (size_t i = 0; i < count; i++) {
        const unsigned char *value = data + i * width;
        if (i > 0 && memcmp(value, value - width, width) == 0) {
            codes[i] = codes[i - 1];
            continue;
        }
        size_t slot = value_hash(value, width) & (capacity - 1);
        while (slots[slot] >= 0 &&
               memcmp(data + (size_t)first[slots[slot]] * width, value, width) != 0)
            slot = (slot + 1) & (capacity - 1);
        if (slots[slot] < 0) {
            if (2 * (distinct + 1) > capacity) { /* grow, then place every value again */
                size_t grown = capacity * 2;
                int64_t *more_first = PyMem_Realloc(first, grown / 2 * sizeof *first);
                int64_t *more_slots = PyMem_Malloc(grown * sizeof *more_slots);
                if (more_first == NULL || more_slots == NULL) {
                    if (more_first != NULL)
                        first = more_first;
                    PyMem_Free(more_slots);
                    PyErr_NoMemory();
                    goto done;
                }
                first = more_first;
                PyMem_Free(slots);
                slots = more_slots;
                capacity = grown;
                memset(slots, 0xff, capacity * sizeof *slots);
                for (size_t k = 0; k < distinct; k++) {
                    size_t at = value_hash(data + (size_t)first[k] * width, width) & (capacity - 1);
                    while (slots[at] >= 0)
                        at = (at + 1) & (capacity - 1);
                    slots[at] = (int64_t)k;
                }
                slot = value_hash(value, width) & (capacity - 1);
                while (slots[slot] >= 0)
                    slot = (slot + 1) & (capacity - 1);
            }
            first[distinct] = (int64_t)i;
            slots[slot] = (int64_t)distinct++;
        }
        codes[i] = slots[slot];
    }
    result = PyList_New((Py_ssize_t)distinct);
    for (size_t k = 0; result != NULL && k < distinct; k++) {
        PyObject *index = PyLong_FromLongLong(first[k]);
        if (index == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, (Py_ssize_t)k, index);
    }
done:
    PyMem_Free(first);
    PyMem_Free(slots);
    borrowed_release_views(&b);
    PyBuffer_Release(&values);
    return result;
}

/* Borrows the int64 arrays of a tuple, each of at least `least` items (0:
 * any; the first one's length is then *count), for reading unless writable. */
static int borrow_tuple(PyObject *tuple, const char *what, const char *const *names,
                        int64_t **arrays, size_t least, size_t *count, int writable,
                        struct borrowed *b)
{
    Py_ssize_t n = 0;
    while (names[n] != NULL)
        n++;
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != n) {
        PyErr_Format(PyExc_TypeError, "replay: %s must be a tuple of %zd arrays", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (borrow_int64_as(PyTuple_GET_ITEM(tuple, i), names[i], 0, least,
                            writable ? PyBUF_WRITABLE : 0, b, &arrays[i]) < 0)
            return -1;
        if (i == 0 && count != NULL) {
            *count = (size_t)(b->views[b->used - 1].len / 8);
            least = *count;
        }
    }
    return 0;
}

/* Every value of `values[0..count)` in [0, bound). */
static int check_indices(const int64_t *values, size_t count, int64_t bound, const char *name)
{
    for (size_t i = 0; i < count; i++) {
        if (values[i] < 0 || values[i] >= bound) {
            PyErr_Format(PyExc_ValueError, "replay: %s[%zu] = %lld is out of range", name, i,
                         (long long)values[i]);
            return -1;
        }
    }
    return 0;
}

static PyObject *native_sliding_median(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *values_obj, *out_obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "OnO", &values_obj, &width, &out_obj))
        return NULL;
    Py_buffer views[2];
    struct borrowed b = {views, 0, 2};
    struct ns_series values, out;
    PyObject *result = NULL;
    if (borrow_items(values_obj, "values", 0, &b, &values, "d", "float64") < 0 ||
        borrow_items(out_obj, "out", PyBUF_WRITABLE, &b, &out, "d", "float64") < 0)
        goto done;
    if (width < 1 || width % 2 == 0 || (size_t)width > values.capacity ||
        out.capacity < values.capacity - (size_t)width + 1) {
        PyErr_SetString(PyExc_ValueError, "native: sliding_median needs an odd width of at most "
                                          "the values, and room for every window");
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = ns_sliding_median((const double *)values.data, (int64_t)values.capacity,
                               (int64_t)width, (double *)out.data);
    Py_END_ALLOW_THREADS
    result = failed ? PyErr_NoMemory() : Py_NewRef(Py_None);
done:
    borrowed_release_views(&b);
    return result;
}

static PyObject *native_covered_time(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *starts_obj, *lengths_obj, *covered_obj;
    long long begin, bin_ns;
    if (!PyArg_ParseTuple(args, "OOLLO", &starts_obj, &lengths_obj, &begin, &bin_ns, &covered_obj))
        return NULL;
    Py_buffer views[3];
    struct borrowed b = {views, 0, 3};
    struct ns_series starts, lengths, covered;
    PyObject *result = NULL;
    if (borrow_buffer(starts_obj, "starts", 0, &b, &starts) < 0 ||
        borrow_buffer(lengths_obj, "lengths", 0, &b, &lengths) < 0 ||
        borrow_series(covered_obj, "covered", &b, &covered) < 0)
        goto done;
    if (starts.capacity != lengths.capacity || bin_ns <= 0) {
        PyErr_SetString(PyExc_ValueError, "native: covered_time needs as many lengths as starts "
                                          "and bins of at least 1 ns");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ns_covered_time((const int64_t *)starts.data, (const int64_t *)lengths.data,
                    (int64_t)starts.capacity, (int64_t)begin, (int64_t)bin_ns,
                    (int64_t)covered.capacity, (int64_t *)covered.data);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    borrowed_release_views(&b);
    return result;
}

static PyObject *native_replay_switches(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *events_obj, *switches_obj, *order_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOOO", &events_obj, &switches_obj, &order_obj, &out_obj))
        return NULL;
    static const char *const event_names[] = {"event_ts", "event_what", "event_pid", "woken", NULL};
    static const char *const switch_names[] = {"switch_ts", "prev_pid", "next_pid", NULL};
    static const char *const out_names[] = {"out_ts", "out_prev_pid", "out_prev_comm",
                                            "out_next_pid", "out_next_comm", NULL};
    Py_buffer views[16];
    struct borrowed b = {views, 0, 16};
    int64_t *events[4], *switches[3], *out[5], *order;
    size_t n_events, n_switches;
    PyObject *result = NULL;
    if (borrow_tuple(events_obj, "events", event_names, events, 0, &n_events, 0, &b) < 0 ||
        borrow_tuple(switches_obj, "switches", switch_names, switches, 0, &n_switches, 0, &b) < 0 ||
        borrow_int64_as(order_obj, "order", 0, n_events + n_switches, 0, &b, &order) < 0 ||
        borrow_tuple(out_obj, "out", out_names, out, n_events + n_switches, NULL, 1, &b) < 0 ||
        check_indices(order, n_events + n_switches, (int64_t)(n_events + n_switches),
                      "order") < 0)
        goto done;
    struct ns_switch_replay replay = {
        (int64_t)n_events, events[0], events[1], events[2], events[3],
        (int64_t)n_switches, switches[0], switches[1], switches[2], order,
        out[0], out[1], out[2], out[3], out[4],
    };
    int64_t inferred;
    Py_BEGIN_ALLOW_THREADS
    inferred = ns_replay_switches(&replay);
    Py_END_ALLOW_THREADS
    result = inferred < 0 ? PyErr_NoMemory() : PyLong_FromLongLong(inferred);
done:
    borrowed_release_views(&b);
    return result;
}

/* Whatever the timeline's replay indexes with is in range (a bad index is a
 * bug of the caller, raised rather than read out of bounds). */
static int check_timeline(const struct ns_timeline_replay *r, int64_t n_events,
                          int64_t n_switches, int64_t n_overlays)
{
    for (int64_t i = 0; i < r->n_items; i++) {
        int64_t kind = r->item_kind[i], ref = r->item_ref[i];
        int64_t bound = kind == NS_ITEM_EVENT ? n_events : kind == NS_ITEM_SWITCH ? n_switches
                        : kind == NS_ITEM_OVERLAY_ENTRY || kind == NS_ITEM_OVERLAY_EXIT ? n_overlays
                        : -1;
        if (bound < 0 || ref < 0 || ref >= bound) {
            PyErr_Format(PyExc_ValueError, "replay: item %lld (kind %lld, row %lld) is out of range",
                         (long long)i, (long long)kind, (long long)ref);
            return -1;
        }
    }
    for (int64_t i = 0; i < n_events; i++) {
        int64_t action = r->action[i], value = r->value[i];
        int pushes = action == NS_ACT_PUSH || action == NS_ACT_PUSH_HARD ||
                     action == NS_ACT_PUSH_TIMER;
        if (action < NS_ACT_SKIP || action > NS_ACT_OWNER_WAKEUP ||
            (pushes && (value < 0 || value >= r->n_labels)) ||
            (action == NS_ACT_HRTIMER && (value < 0 || value >= r->n_functions))) {
            PyErr_Format(PyExc_ValueError, "replay: event %lld (action %lld, value %lld) is out "
                         "of range", (long long)i, (long long)action, (long long)value);
            return -1;
        }
    }
    return check_indices(r->overlay_label, (size_t)n_overlays, r->n_labels,
                         "overlay_label") < 0 ||
           check_indices(r->function_label, (size_t)r->n_functions + 1, r->n_labels,
                         "function_label") < 0 ||
           check_indices(r->function_own_label, (size_t)r->n_functions + 1, r->n_labels,
                         "function_own_label") < 0 ||
           check_indices(&r->tick_label, 1, r->n_labels, "tick_label") < 0 ? -1 : 0;
}

static PyObject *native_replay_timeline(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *items_obj, *events_obj, *switches_obj, *overlays_obj, *functions_obj;
    PyObject *segments_obj, *context_obj, *wakeups_obj, *sleeps_obj, *first_use_obj;
    long long tick_label, task, pid;
    if (!PyArg_ParseTuple(args, "OOOOOL(LL)(OOOOO)", &items_obj, &events_obj, &switches_obj,
                          &overlays_obj, &functions_obj, &tick_label, &task, &pid, &segments_obj,
                          &context_obj, &wakeups_obj, &sleeps_obj, &first_use_obj))
        return NULL;
    static const char *const item_names[] = {"item_kind", "item_ref", NULL};
    static const char *const event_names[] = {"event_ts", "action", "kind", "key", "value", NULL};
    static const char *const switch_names[] = {"switch_ts", "switch_task", "switch_pid",
                                               "owner_sleeps", NULL};
    static const char *const overlay_names[] = {"overlay_start", "overlay_end", "overlay_label",
                                                "overlay_timer", NULL};
    static const char *const function_names[] = {"function_tick", "function_label",
                                                 "function_own_label", NULL};
    static const char *const segment_names[] = {"segment_start", "segment_context",
                                                "segment_task", "segment_pid", "segment_since",
                                                NULL};
    Py_buffer views[32];
    struct borrowed b = {views, 0, 32};
    int64_t *items[2], *events[5], *switches[4], *overlays[4], *functions[3], *segments[5];
    int64_t *context_label, *wakeups, *sleeps, *first_use;
    size_t n_items, n_events, n_switches, n_overlays, n_functions;
    PyObject *result = NULL;
    if (borrow_tuple(items_obj, "items", item_names, items, 0, &n_items, 0, &b) < 0 ||
        borrow_tuple(events_obj, "events", event_names, events, 0, &n_events, 0, &b) < 0 ||
        borrow_tuple(switches_obj, "switches", switch_names, switches, 0, &n_switches, 0, &b) < 0 ||
        borrow_tuple(overlays_obj, "overlays", overlay_names, overlays, 0, &n_overlays, 0, &b) < 0 ||
        borrow_tuple(functions_obj, "functions", function_names, functions, 1, &n_functions, 0,
                     &b) < 0 ||
        borrow_tuple(segments_obj, "segments", segment_names, segments, n_items + 1, NULL, 1,
                     &b) < 0 ||
        borrow_int64(context_obj, "context_labels", 0, n_items, &b, &context_label) < 0 ||
        borrow_int64(wakeups_obj, "wakeups", 0, n_items, &b, &wakeups) < 0 ||
        borrow_int64(sleeps_obj, "sleeps", 0, n_items, &b, &sleeps) < 0 ||
        borrow_int64(first_use_obj, "first_use", 0, 0, &b, &first_use) < 0)
        goto done;
    struct ns_timeline_replay replay = {
        .n_items = (int64_t)n_items, .item_kind = items[0], .item_ref = items[1],
        .event_ts = events[0], .action = events[1], .kind = events[2], .key = events[3],
        .value = events[4],
        .switch_ts = switches[0], .switch_task = switches[1], .switch_pid = switches[2],
        .owner_sleeps = switches[3],
        .overlay_start = overlays[0], .overlay_end = overlays[1], .overlay_label = overlays[2],
        .overlay_timer = overlays[3],
        .function_tick = functions[0], .function_label = functions[1],
        .function_own_label = functions[2], .n_functions = (int64_t)n_functions - 1,
        .n_labels = (int64_t)(b.views[b.used - 1].len / 8), .tick_label = tick_label,
        .task = task, .pid = pid,
        .segment_start = segments[0], .segment_context = segments[1], .segment_task = segments[2],
        .segment_pid = segments[3], .segment_since = segments[4],
        .context_label = context_label, .wakeups = wakeups, .sleeps = sleeps,
        .first_use = first_use,
    };
    if (check_timeline(&replay, (int64_t)n_events, (int64_t)n_switches, (int64_t)n_overlays) < 0)
        goto done;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = ns_replay_timeline(&replay);
    Py_END_ALLOW_THREADS
    result = failed ? PyErr_NoMemory()
                    : Py_BuildValue("LLLL", (long long)replay.segments, (long long)replay.contexts,
                                    (long long)replay.n_wakeups, (long long)replay.n_sleeps);
done:
    borrowed_release_views(&b);
    return result;
}

/* Every value of `values[0..count)` in [-1, bound): an index or none. */
static int check_optional_indices(const int64_t *values, size_t count, int64_t bound,
                                  const char *name)
{
    for (size_t i = 0; i < count; i++) {
        if (values[i] < -1 || values[i] >= bound) {
            PyErr_Format(PyExc_ValueError, "split: %s[%zu] = %lld is out of range", name, i,
                         (long long)values[i]);
            return -1;
        }
    }
    return 0;
}

/* The spans' segments in range and the output room for all their pieces; the
 * injected sets' rows in order, none empty. */
static int check_split(const struct ns_span_split *r, size_t room)
{
    size_t pieces = 0;
    for (int64_t i = 0; i < r->n_spans; i++) {
        if (r->first[i] < 0 || r->last[i] < r->first[i] || r->last[i] >= r->n_segments) {
            PyErr_Format(PyExc_ValueError, "split: span %lld covers segments %lld..%lld of %lld",
                         (long long)i, (long long)r->first[i], (long long)r->last[i],
                         (long long)r->n_segments);
            return -1;
        }
        pieces += (size_t)(r->last[i] - r->first[i] + 1) + (size_t)r->n_injected;
    }
    if (pieces > room) {
        PyErr_Format(PyExc_ValueError, "split: room for %zu rows, needs %zu", room, pieces);
        return -1;
    }
    if (r->injected_rows[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "split: injected rows must begin at 0");
        return -1;
    }
    for (int64_t j = 0; j < r->n_injected; j++) {
        if (r->injected_rows[j + 1] <= r->injected_rows[j]) {
            PyErr_Format(PyExc_ValueError, "split: injected set %lld is empty", (long long)j);
            return -1;
        }
    }
    int64_t fallbacks[] = {r->no_guest, r->outside, r->cpu_idle, r->before_wakeup,
                           r->unexplained};
    return check_optional_indices(r->segment_label, (size_t)r->n_segments, r->n_labels,
                                  "segment_label") < 0 ||
           check_optional_indices(r->segment_task, (size_t)r->n_segments, r->n_tasks,
                                  "segment_task") < 0 ||
           check_indices(r->thread_label, (size_t)r->n_tasks, r->n_labels, "thread_label") < 0 ||
           check_indices(r->injected_label, (size_t)r->n_injected, r->n_labels,
                         "injected_label") < 0 ||
           check_indices(fallbacks, 5, r->n_labels, "fallback label") < 0 ? -1 : 0;
}

static PyObject *native_split_spans(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *segments_obj, *spans_obj, *woken_obj, *labels_obj, *thread_obj, *sets_obj;
    PyObject *intervals_obj, *out_obj, *primary_obj;
    long long fallback[5];
    if (!PyArg_ParseTuple(args, "OOOOO(LLLLL)OOOO", &segments_obj, &spans_obj, &woken_obj,
                          &labels_obj, &thread_obj, &fallback[0], &fallback[1], &fallback[2],
                          &fallback[3], &fallback[4], &sets_obj, &intervals_obj, &out_obj,
                          &primary_obj))
        return NULL;
    static const char *const segment_names[] = {"segment_start", "segment_label",
                                                "segment_task", "segment_pid", "segment_since",
                                                NULL};
    static const char *const span_names[] = {"start", "end", "first", "last", "owner", NULL};
    static const char *const label_names[] = {"is_fault", "explains", "rank", NULL};
    static const char *const interval_names[] = {"injected_start", "injected_length",
                                                 "injected_before", NULL};
    static const char *const out_names[] = {"out_span", "out_label", "out_ns", NULL};
    Py_buffer views[32];
    struct borrowed b = {views, 0, 32};
    int64_t *segments[5], *spans[5], *labels[3], *intervals[3], *out[3];
    int64_t *woken_at, *thread_label, *injected_label, *injected_rows, *primary;
    size_t n_segments, n_spans, n_labels, n_tasks, n_injected, n_intervals, room;
    PyObject *result = NULL;
    if (!PyTuple_Check(sets_obj) || PyTuple_GET_SIZE(sets_obj) != 2) {
        PyErr_SetString(PyExc_TypeError, "split: injected sets must be (labels, rows)");
        return NULL;
    }
    if (borrow_tuple(segments_obj, "segments", segment_names, segments, 0, &n_segments, 0,
                     &b) < 0 ||
        borrow_tuple(spans_obj, "spans", span_names, spans, 0, &n_spans, 0, &b) < 0 ||
        borrow_int64_as(woken_obj, "woken_at", 1, n_spans, 0, &b, &woken_at) < 0 ||
        borrow_int64(primary_obj, "primary", 0, n_spans, &b, &primary) < 0 ||
        borrow_tuple(labels_obj, "labels", label_names, labels, 0, &n_labels, 0, &b) < 0 ||
        borrow_int64_as(thread_obj, "thread_label", 0, 0, 0, &b, &thread_label) < 0)
        goto done;
    n_tasks = (size_t)(b.views[b.used - 1].len / 8);
    if (borrow_int64_as(PyTuple_GET_ITEM(sets_obj, 0), "injected_label", 0, 0, 0, &b,
                        &injected_label) < 0)
        goto done;
    n_injected = (size_t)(b.views[b.used - 1].len / 8);
    if (borrow_int64_as(PyTuple_GET_ITEM(sets_obj, 1), "injected_rows", 0, n_injected + 1, 0,
                        &b, &injected_rows) < 0 ||
        borrow_tuple(intervals_obj, "intervals", interval_names, intervals, 0, &n_intervals, 0,
                     &b) < 0 ||
        borrow_tuple(out_obj, "out", out_names, out, 0, &room, 1, &b) < 0)
        goto done;
    if (injected_rows[n_injected] != (int64_t)n_intervals) {
        PyErr_SetString(PyExc_ValueError, "split: the injected sets' rows must end at the last "
                                          "interval");
        goto done;
    }
    struct ns_span_split split = {
        .n_segments = (int64_t)n_segments, .segment_start = segments[0],
        .segment_label = segments[1], .segment_task = segments[2], .segment_pid = segments[3],
        .segment_since = segments[4],
        .n_spans = (int64_t)n_spans, .start = spans[0], .end = spans[1], .first = spans[2],
        .last = spans[3], .owner = spans[4], .woken_at = woken_at,
        .n_labels = (int64_t)n_labels, .is_fault = labels[0], .explains = labels[1],
        .rank = labels[2], .n_tasks = (int64_t)n_tasks, .thread_label = thread_label,
        .no_guest = fallback[0], .outside = fallback[1], .cpu_idle = fallback[2],
        .before_wakeup = fallback[3], .unexplained = fallback[4],
        .n_injected = (int64_t)n_injected, .injected_label = injected_label,
        .injected_rows = injected_rows, .injected_start = intervals[0],
        .injected_length = intervals[1], .injected_before = intervals[2],
        .out_span = out[0], .out_label = out[1], .out_ns = out[2], .primary = primary,
    };
    if (check_split(&split, room) < 0)
        goto done;
    int64_t rows;
    Py_BEGIN_ALLOW_THREADS
    rows = ns_split_spans(&split);
    Py_END_ALLOW_THREADS
    result = rows < 0 ? PyErr_NoMemory() : PyLong_FromLongLong(rows);
done:
    borrowed_release_views(&b);
    return result;
}

static PyMethodDef methods[] = {
    {"run", native_run, METH_VARARGS, run_doc},
    {"ticks", native_ticks, METH_NOARGS, "Current tick count of the measurement clock."},
    {"calibrate_ticks_per_ns", native_calibrate, METH_VARARGS,
     "Ticks per nanosecond against CLOCK_MONOTONIC_RAW over duration_ns."},
    {"loop_resolution_ticks", native_loop_resolution, METH_VARARGS,
     "Shortest common gap (>= 1% of iterations) between clock reads over duration_ticks."},
    {"min_work_ticks", native_min_work, METH_VARARGS,
     "Fewest ticks taken by (units, unit_iters) of work over repetitions."},
    {"timed_work", native_timed_work, METH_VARARGS,
     "Ticks taken by (units, unit_iters) of work, done once."},
    {"histogram_lower_bounds", native_histogram_lower_bounds, METH_NOARGS,
     "Lower bound in ticks of every bucket of the gap histogram."},
    {"walk_pages", native_walk_pages, METH_VARARGS,
     "walk_pages(pages, (timestamp_offset, commit_offset, commit_size, data_offset, page_size), "
     "offsets, stamps) -> (records, missed pages): each data record's payload offset and time "
     "stamp into the two 64-bit arrays (those beyond their length are counted, not written)."},
    {"decode_records", native_decode_records, METH_VARARGS,
     "decode_records(data, offsets, stamps, slot_of_id, formats, events, switches, keys) -> "
     "(events, switches, keys): the fields of the records (pages.h ns_decode_records)."},
    {"cpuid", native_cpuid, METH_VARARGS, "CPUID (leaf, subleaf) -> (eax, ebx, ecx, edx)."},
    {"mlockall", native_mlockall, METH_NOARGS, "mlockall(); returns 0 or errno."},
    {"munlockall", native_munlockall, METH_NOARGS, "munlockall(); returns 0 or errno."},
    {"injection_signal", native_injection_signal, METH_NOARGS,
     "The real-time signal used by signal-mode injection."},
    {"predict_windows", native_predict_windows, METH_VARARGS,
     "predict_windows(axis, at, busy, span, total, in_progress, noise): noise of windows."},
    {"predict_finish", native_predict_finish, METH_VARARGS,
     "predict_finish(replay, start, end, first, busy): ends of busy windows, noise included."},
    {"predict_compute", native_predict_compute, METH_VARARGS,
     "predict_compute(machine, replay, length, threads): every process computes."},
    {"predict_allreduce", native_predict_allreduce, METH_VARARGS,
     "predict_allreduce(machine, replay, power, block, group, threads): exchange rounds."},
    {"dictionary_codes", native_dictionary_codes, METH_VARARGS,
     "dictionary_codes(values, codes) -> distinct: each value's code (its distinct value's "
     "place in order of first appearance) into codes (int64), for an object array."},
    {"factorize", native_factorize, METH_VARARGS,
     "factorize(values, codes) -> first: each fixed-width value's code (its distinct value's "
     "place in order of first appearance) into codes (int64), and where each distinct value "
     "first appears."},
    {"sliding_median", native_sliding_median, METH_VARARGS,
     "sliding_median(values, width, out): the median of each window of `width` values (odd) "
     "into out (float64; values finite: median.h)."},
    {"covered_time", native_covered_time, METH_VARARGS,
     "covered_time(starts, lengths, begin, bin_ns, covered): the ns of each bin of bin_ns from "
     "begin that the intervals cover, added into covered (int64; coverage.h)."},
    {"replay_switches", native_replay_switches, METH_VARARGS,
     "replay_switches(events, switches, order, out) -> count: the switches one CPU's trace "
     "missed (trace/switches.py, replay.h)."},
    {"replay_timeline", native_replay_timeline, METH_VARARGS,
     "replay_timeline(items, events, switches, overlays, functions, tick_label, (task, pid), "
     "out) -> (segments, contexts, wakeups, sleeps): one CPU's timeline (trace/attribute.py, "
     "replay.h)."},
    {"split_spans", native_split_spans, METH_VARARGS,
     "split_spans(segments, spans, woken_at, labels, thread_label, fallbacks, (injected_label, "
     "injected_rows), intervals, out, primary) -> rows: each span's time among its causes "
     "(trace/attribute.py _split, replay.h)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "noisescope._native", "The native measurement core.", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* The replays' codes (replay.h), for trace/switches.py and trace/attribute.py. */
static int add_replay_constants(PyObject *m)
{
    static const struct {
        const char *name;
        int value;
    } codes[] = {
        {"SWITCH_OTHER", NS_SWITCH_OTHER}, {"SWITCH_HANDLER_ENTRY", NS_SWITCH_HANDLER_ENTRY},
        {"SWITCH_HANDLER_EXIT", NS_SWITCH_HANDLER_EXIT}, {"SWITCH_WAKEUP", NS_SWITCH_WAKEUP},
        {"ITEM_EVENT", NS_ITEM_EVENT}, {"ITEM_SWITCH", NS_ITEM_SWITCH},
        {"ITEM_OVERLAY_ENTRY", NS_ITEM_OVERLAY_ENTRY}, {"ITEM_OVERLAY_EXIT", NS_ITEM_OVERLAY_EXIT},
        {"ACT_SKIP", NS_ACT_SKIP}, {"ACT_MARK", NS_ACT_MARK}, {"ACT_PUSH", NS_ACT_PUSH},
        {"ACT_PUSH_HARD", NS_ACT_PUSH_HARD}, {"ACT_PUSH_TIMER", NS_ACT_PUSH_TIMER},
        {"ACT_POP", NS_ACT_POP}, {"ACT_HRTIMER", NS_ACT_HRTIMER},
        {"ACT_OWNER_WAKEUP", NS_ACT_OWNER_WAKEUP},
        {"KIND_FAULT", NS_KIND_FAULT}, {"KIND_OVERLAY", NS_KIND_OVERLAY},
        {"FIELD_ABSENT", NS_FIELD_ABSENT}, {"FIELD_INT", NS_FIELD_INT},
        {"FIELD_BYTES", NS_FIELD_BYTES}, {"FIELD_DATA_LOC", NS_FIELD_DATA_LOC},
        {"FIELD_INT_KEY", NS_FIELD_INT_KEY}, {"RECORD_FIELDS", NS_RECORD_FIELDS},
        {"ROLE_IGNORED", NS_ROLE_IGNORED}, {"ROLE_EVENT", NS_ROLE_EVENT},
        {"ROLE_SWITCH", NS_ROLE_SWITCH},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (PyModule_AddIntConstant(m, codes[i].name, codes[i].value) < 0)
            return -1;
    return 0;
}

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "HAS_TSC", NS_HAVE_TSC) < 0 ||
        PyModule_AddIntConstant(m, "HISTOGRAM_BINS", NS_HIST_BINS) < 0 ||
        PyModule_AddIntConstant(m, "HISTOGRAM_FLOOR_TICKS", NS_HIST_FLOOR) < 0 ||
        PyModule_AddIntConstant(m, "CONTROL_STRIDE", NS_CONTROL_STRIDE) < 0 ||
        PyModule_AddIntConstant(m, "SLOT_PROGRESS", NS_SLOT_PROGRESS) < 0 ||
        PyModule_AddIntConstant(m, "SLOT_PUBLISHED", NS_SLOT_PUBLISHED) < 0 ||
        PyModule_AddIntConstant(m, "SLOT_TAKEN", NS_SLOT_TAKEN) < 0 ||
        add_replay_constants(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
