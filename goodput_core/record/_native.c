/*
 * goodput_core.record._native: a training loop's per-step recording, compiled.
 *
 * A PyTorch step on the CPU leaves the caches cold; every Python frame and
 * every call run in them costs microseconds (benchmarks/README.md, "One
 * journal write a step"). Here the step wrapper (Steps), the loader's
 * iterator (Loads) and the journal writes they make (Loop) are C: a step
 * costs no Python frame of ours, and its events go into the journal's slots
 * as record/hot_calls.py's one-frame calls write them (the same bytes, the
 * trailing ticket last).
 *
 * Nothing here decides anything: every case but the common one (a journal
 * open for writing, a float clock, an int step, room in the ring) is handed
 * to the Python call that does it (the recorder's methods, hot_calls.spill,
 * the Python wrappers), so behaviour is the Python path's. Nothing raises
 * into the loop: a failed recording is handed to the adapter's log call and
 * the step runs.
 *
 * Built by setup.py as an optional extension: without a compiler the
 * package installs without it and the Python paths run (record/native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <structmember.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if !PY_LITTLE_ENDIAN
#error "the journal's slots are little-endian: the Python path writes them on this host"
#endif

#define SLOT 128
#define HAS_STEP 256

/* interned attribute names */
static PyObject *s_emit, *s_process_index, *s_progress_thread, *s_freed,
    *s_registered_in, *s_current, *s_active, *s_native_loop, *s_next_step, *s_first_step;

static PyTypeObject LoopType, StepsType, LoadsType, CounterType;

/* ------------------------------------------------------------------ Loop */

typedef struct {
    PyObject_HEAD
    PyObject *rec;              /* _emit, process_index, progress_thread */
    PyObject *emit;             /* the ring's producer while the recorder is open */
    PyObject *ring;             /* freed */
    PyObject *mm;               /* the journal's slots */
    PyObject *tickets;          /* the ring's itertools.count */
    PyObject *wake;             /* the writer's wake-up */
    PyObject *clock;            /* the recorder's clock */
    PyObject *record_start;     /* rec.record_step_start_time(step) */
    PyObject *record_end;       /* rec.record_step_end_time(step) */
    PyObject *stall_then_start; /* rec._record_stall_then_step(t0, t1, step) */
    PyObject *record_stall;     /* (t0, t1): a stall no step followed */
    PyObject *spill;            /* hot_calls.spill(ring, emit, tickets, events) */
    PyObject *lazy;             /* the adapter's late hooks */
    PyObject *compile_spans;    /* ._registered_in: the list our compile callback is in */
    PyObject *registered;       /* that list as last read (at the start, after each lazy()) */
    PyObject *start_cb;         /* that callback */
    PyObject *modules;          /* sys.modules: its size changes at an import */
    PyObject *on_error;         /* (what, message, exception): logged once */
    PyObject *thread_id;        /* the last ident, as an int */
    PyObject *last_step;        /* the step last started through this (TorchAdapter.last_step) */
    unsigned long ident;
    long long slots, half, every;
    int code_start, code_end, code_stall_start, code_stall_end;
    Py_ssize_t modules_seen;
    int live, has_pending;
    double p0, p1;
} Loop;

typedef struct {
    int code;       /* kind | flags << 8 */
    double t;       /* NAN: now */
    long long step;
} Ev;

/* The adapter's log call for a failed recording, with the exception set now
 * (cleared). Never raises. */
static void
failed(Loop *L, const char *what, const char *msg)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    if (L->on_error != NULL && L->on_error != Py_None) {
        PyObject *r = PyObject_CallFunction(L->on_error, "ssO", what, msg,
                                            value ? value : Py_None);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* 0: *t is the clock's finite float; 1: not (the Python call reads it and says why). */
static int
now(Loop *L, double *t)
{
    PyObject *r = PyObject_CallNoArgs(L->clock);
    if (r == NULL) {
        PyErr_Clear();
        return 1;
    }
    int ok = PyFloat_CheckExact(r);
    if (ok) {
        *t = PyFloat_AS_DOUBLE(r);
        ok = isfinite(*t);
    }
    Py_DECREF(r);
    return !ok;
}

static int
as_i64(PyObject *o, long long *out)
{
    if (o == NULL || !PyLong_CheckExact(o))
        return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static void
put_slot(char *p, unsigned long long n, int code, double t, long long step, double wt,
         long long pidx)
{
    char s[SLOT - 8];
    uint16_t c = (uint16_t)code;
    memset(s, 0, sizeof s);
    memcpy(s, &n, 8);
    memcpy(s + 8, &c, 2);
    memcpy(s + 16, &t, 8);
    memcpy(s + 24, &step, 8);
    memcpy(s + 32, &wt, 8);
    memcpy(s + 40, &pidx, 8);
    memcpy(p, s, sizeof s);
    /* the trailing ticket last: a process killed before it leaves a torn slot */
#if defined(__GNUC__) || defined(__clang__)
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#elif defined(_MSC_VER)
    _ReadWriteBarrier();
#endif
    memcpy(p + SLOT - 8, &n, 8);
}

/* The events handed to the ring's producer under new tickets (hot_calls.spill):
 * the taken ones passed over. 0 or -1 (error set). */
static int
spill(Loop *L, const unsigned long long *n, int taken, const Ev *ev, int count, double t)
{
    PyObject *tk = PyTuple_New(taken), *evs = PyTuple_New(count), *r = NULL;
    if (tk == NULL || evs == NULL)
        goto done;
    for (int i = 0; i < taken; i++) {
        PyObject *k = PyLong_FromUnsignedLongLong(n[i]);
        if (k == NULL)
            goto done;
        PyTuple_SET_ITEM(tk, i, k);
    }
    for (int i = 0; i < count; i++) {
        PyObject *e;
        double et = isnan(ev[i].t) ? t : ev[i].t;
        if (ev[i].code & HAS_STEP)
            e = Py_BuildValue("(idLOd)", ev[i].code & 0xFF, et, ev[i].step, Py_None, t);
        else
            e = Py_BuildValue("(idOOd)", ev[i].code & 0xFF, et, Py_None, Py_None, t);
        if (e == NULL)
            goto done;
        PyTuple_SET_ITEM(evs, i, e);
    }
    r = PyObject_CallFunctionObjArgs(L->spill, L->ring, L->emit, tk, evs, NULL);
done:
    Py_XDECREF(tk);
    Py_XDECREF(evs);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Writes ``count`` (1..3) events of the training thread into consecutive
 * slots. 0: recorded; 1: not attempted (the caller's Python call records
 * them); -1: an error is set. */
static int
journal_write(Loop *L, const Ev *ev, int count)
{
    double t;
    long long pidx, freed;
    unsigned long long n[3];
    int taken = 0;

    if (now(L, &t))
        return 1;
    PyObject *e = PyObject_GetAttr(L->rec, s_emit);
    if (e == NULL) {
        PyErr_Clear();
        return 1;
    }
    Py_DECREF(e);
    if (e != L->emit)  /* the recorder closed: the generic path says so */
        return 1;
    PyObject *p = PyObject_GetAttr(L->rec, s_process_index);
    int bad = as_i64(p, &pidx);
    Py_XDECREF(p);
    if (bad) {
        PyErr_Clear();
        return 1;
    }
    unsigned long ident = PyThread_get_thread_ident();
    if (L->thread_id == NULL || ident != L->ident) {
        PyObject *id = PyLong_FromUnsignedLong(ident);
        if (id == NULL)
            return -1;
        Py_XSETREF(L->thread_id, id);
        L->ident = ident;
    }
    if (PyObject_SetAttr(L->rec, s_progress_thread, L->thread_id) < 0)
        return -1;
    /* consecutive: itertools.count's next runs no Python code, the GIL is held */
    for (; taken < count; taken++) {
        PyObject *k = PyIter_Next(L->tickets);
        if (k == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "the ring's tickets ran out");
            return -1;
        }
        n[taken] = PyLong_AsUnsignedLongLong(k);
        Py_DECREF(k);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return spill(L, n, taken, ev, count, t);
        }
    }
    PyObject *f = PyObject_GetAttr(L->ring, s_freed);
    bad = as_i64(f, &freed);
    Py_XDECREF(f);
    long long room = (long long)(n[count - 1] - (unsigned long long)freed);
    long long first = (long long)(n[0] % (unsigned long long)L->slots);
    if (!bad && first + count <= L->slots && room <= L->slots) {
        Py_buffer view;
        if (PyObject_GetBuffer(L->mm, &view, PyBUF_WRITABLE) == 0) {
            if ((first + count) * SLOT <= view.len) {
                char *base = (char *)view.buf + first * SLOT;
                for (int i = 0; i < count; i++)
                    put_slot(base + i * SLOT, n[i], ev[i].code, isnan(ev[i].t) ? t : ev[i].t,
                             (ev[i].code & HAS_STEP) ? ev[i].step : 0, t, pidx);
                PyBuffer_Release(&view);
                if (room >= L->half) {
                    PyObject *r = PyObject_CallNoArgs(L->wake);
                    if (r == NULL)
                        return -1;
                    Py_DECREF(r);
                }
                return 0;
            }
            PyBuffer_Release(&view);
        }
        PyErr_Clear();  /* a closed journal: the producer's way */
    }
    PyErr_Clear();
    /* across the ring's end or past its room: the producer writes them */
    return spill(L, n, taken, ev, count, t);
}

/* The adapter's late hooks when a module was imported since the last step
 * or our compile callback is no longer the handler's last (a reset). */
static void
late_hooks(Loop *L)
{
    int need = 0;
    PyObject *reg = L->registered;
    if (reg != NULL && PyList_Check(reg) && PyList_GET_SIZE(reg) > 0)
        need = PyList_GET_ITEM(reg, PyList_GET_SIZE(reg) - 1) != L->start_cb;
    if (PyDict_GET_SIZE(L->modules) != L->modules_seen)
        need = 1;
    if (!need)
        return;
    PyObject *r = PyObject_CallNoArgs(L->lazy);
    if (r == NULL)
        failed(L, "step-start", "goodput: attaching torch hooks failed");
    Py_XDECREF(r);
    L->modules_seen = PyDict_GET_SIZE(L->modules);
    /* the callback may be in another list now (registered again after a reset) */
    Py_XSETREF(L->registered, PyObject_GetAttr(L->compile_spans, s_registered_in));
    if (L->registered == NULL)
        PyErr_Clear();
}

static void
loop_start(Loop *L, PyObject *step_obj, long long step)
{
    Py_XSETREF(L->last_step, Py_NewRef(step_obj));
    late_hooks(L);
    int r;
    PyObject *res = NULL;
    if (L->has_pending) {
        double p0 = L->p0, p1 = L->p1;
        L->has_pending = 0;
        Ev ev[3] = {{L->code_stall_start, p0, 0}, {L->code_stall_end, p1, 0},
                    {L->code_start | HAS_STEP, NAN, step}};
        r = journal_write(L, ev, 3);
        if (r == 1)
            res = PyObject_CallFunction(L->stall_then_start, "ddO", p0, p1, step_obj);
    } else {
        Ev ev[1] = {{L->code_start | HAS_STEP, NAN, step}};
        r = journal_write(L, ev, 1);
        if (r == 1)
            res = PyObject_CallOneArg(L->record_start, step_obj);
    }
    if (r == 1)
        r = res == NULL ? -1 : 0;
    Py_XDECREF(res);
    if (r < 0)
        failed(L, "step-start", "goodput: recording a step start failed");
}

static void
loop_end(Loop *L, long long step)
{
    Ev ev[1] = {{L->code_end | HAS_STEP, NAN, step}};
    int r = journal_write(L, ev, 1);
    if (r == 1) {
        PyObject *res = PyObject_CallFunction(L->record_end, "L", step);
        r = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    if (r < 0)
        failed(L, "step-end", "goodput: recording a step end failed");
}

/* A load [t0, t1): kept for the next step's start; one still kept (no step
 * came after it) is recorded first. */
static void
loop_stall(Loop *L, double t0, double t1)
{
    if (L->has_pending) {
        L->has_pending = 0;
        PyObject *r = PyObject_CallFunction(L->record_stall, "dd", L->p0, L->p1);
        if (r == NULL)
            failed(L, "data-record", "goodput: recording a data-loading span failed");
        Py_XDECREF(r);
    }
    L->p0 = t0;
    L->p1 = t1;
    L->has_pending = 1;
}

static int
Loop_init(Loop *L, PyObject *args, PyObject *kw)
{
    static char *names[] = {"rec", "emit", "ring", "mm", "tickets", "wake", "clock",
                            "record_start", "record_end", "stall_then_start", "record_stall",
                            "spill", "lazy", "compile_spans", "start_cb", "modules",
                            "on_error", "slots", "half", "every", "codes", NULL};
    PyObject *o[17];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "$OOOOOOOOOOOOOOOO!OLLL(iiii)", names,
                                     &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                                     &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14],
                                     &PyDict_Type, &o[15], &o[16], &L->slots,
                                     &L->half, &L->every, &L->code_start, &L->code_end,
                                     &L->code_stall_start, &L->code_stall_end))
        return -1;
    if (L->slots < 3 || L->half < 1) {
        PyErr_SetString(PyExc_ValueError, "a ring of at least 3 slots");
        return -1;
    }
    PyObject **dst[17] = {&L->rec, &L->emit, &L->ring, &L->mm, &L->tickets,
                          &L->wake, &L->clock, &L->record_start, &L->record_end,
                          &L->stall_then_start, &L->record_stall, &L->spill, &L->lazy,
                          &L->compile_spans, &L->start_cb, &L->modules, &L->on_error};
    for (int i = 0; i < 17; i++)
        Py_XSETREF(*dst[i], Py_NewRef(o[i]));
    L->modules_seen = -1;  /* the first step looks (and reads the list) */
    L->live = 1;
    return 0;
}

static int
Loop_traverse(Loop *L, visitproc visit, void *arg)
{
    Py_VISIT(L->rec); Py_VISIT(L->emit); Py_VISIT(L->ring);
    Py_VISIT(L->mm); Py_VISIT(L->tickets); Py_VISIT(L->wake); Py_VISIT(L->clock);
    Py_VISIT(L->record_start); Py_VISIT(L->record_end); Py_VISIT(L->stall_then_start);
    Py_VISIT(L->record_stall); Py_VISIT(L->spill); Py_VISIT(L->lazy);
    Py_VISIT(L->compile_spans); Py_VISIT(L->start_cb); Py_VISIT(L->modules);
    Py_VISIT(L->on_error); Py_VISIT(L->last_step); Py_VISIT(L->registered);
    return 0;
}

static int
Loop_clear(Loop *L)
{
    L->live = 0;
    Py_CLEAR(L->rec); Py_CLEAR(L->emit); Py_CLEAR(L->ring);
    Py_CLEAR(L->mm); Py_CLEAR(L->tickets); Py_CLEAR(L->wake); Py_CLEAR(L->clock);
    Py_CLEAR(L->record_start); Py_CLEAR(L->record_end); Py_CLEAR(L->stall_then_start);
    Py_CLEAR(L->record_stall); Py_CLEAR(L->spill); Py_CLEAR(L->lazy);
    Py_CLEAR(L->compile_spans); Py_CLEAR(L->start_cb); Py_CLEAR(L->modules);
    Py_CLEAR(L->on_error); Py_CLEAR(L->thread_id); Py_CLEAR(L->last_step);
    Py_CLEAR(L->registered);
    return 0;
}

static void
Loop_dealloc(Loop *L)
{
    PyObject_GC_UnTrack(L);
    Loop_clear(L);
    Py_TYPE(L)->tp_free((PyObject *)L);
}

static int
loop_ready(Loop *L)
{
    if (!L->live || L->rec == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this loop's recording was stopped");
        return 0;
    }
    return 1;
}

static PyObject *
Loop_start(Loop *L, PyObject *step)
{
    long long k;
    if (!loop_ready(L))
        return NULL;
    if (as_i64(step, &k) < 0) {  /* not a plain 64-bit int: the recorder's own calls */
        if (!L->has_pending)
            return PyObject_CallOneArg(L->record_start, step);
        L->has_pending = 0;
        return PyObject_CallFunction(L->stall_then_start, "ddO", L->p0, L->p1, step);
    }
    loop_start(L, step, k);
    Py_RETURN_NONE;
}

static PyObject *
Loop_end(Loop *L, PyObject *args)
{
    PyObject *step, *sync_every;
    long long k, count, every;
    if (!PyArg_ParseTuple(args, "OLO", &step, &count, &sync_every) || !loop_ready(L))
        return NULL;
    if (sync_every == Py_None)
        Py_RETURN_NONE;
    if (PyUnicode_Check(sync_every))
        every = L->every;
    else if (as_i64(sync_every, &every) < 0) {
        PyErr_SetString(PyExc_TypeError, "sync_every: an int, 'auto' or None");
        return NULL;
    }
    if (every <= 0 || count % every)
        Py_RETURN_NONE;
    if (as_i64(step, &k) < 0)
        return PyObject_CallOneArg(L->record_end, step);
    loop_end(L, k);
    Py_RETURN_NONE;
}

static PyObject *
Loop_loaded(Loop *L, PyObject *arg)
{
    double t0 = PyFloat_AsDouble(arg), t1;
    if ((t0 == -1.0 && PyErr_Occurred()) || !loop_ready(L))
        return NULL;
    if (now(L, &t1)) {
        PyErr_SetString(PyExc_ValueError, "the clock gave no finite float");
        return NULL;
    }
    loop_stall(L, t0, t1);
    Py_RETURN_NONE;
}

static PyObject *
Loop_take(Loop *L, PyObject *unused)
{
    if (!L->has_pending)
        Py_RETURN_NONE;
    L->has_pending = 0;
    return Py_BuildValue("(dd)", L->p0, L->p1);
}


static PyMethodDef Loop_methods[] = {
    {"start", (PyCFunction)Loop_start, METH_O,
     "start(step): the step's start now, with the load kept before it (one write)."},
    {"end", (PyCFunction)Loop_end, METH_VARARGS,
     "end(step, count, sync_every): the step's end now when the count is due."},
    {"loaded", (PyCFunction)Loop_loaded, METH_O,
     "loaded(t0): a load from t0 to now, kept for the next step's start."},
    {"take", (PyCFunction)Loop_take, METH_NOARGS,
     "take(): the load kept and not yet written, (t0, t1), or None; forgets it."},
    {NULL}
};


static PyMemberDef Loop_members[] = {
    {"last_step", T_OBJECT, offsetof(Loop, last_step), 0,
     "the step last started through this loop (None before)"},
    {NULL}
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goodput_core.record._native.Loop",
    .tp_doc = "One process's per-step journal writes for a training loop (record/native.py).",
    .tp_basicsize = sizeof(Loop),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loop_init,
    .tp_traverse = (traverseproc)Loop_traverse,
    .tp_clear = (inquiry)Loop_clear,
    .tp_dealloc = (destructor)Loop_dealloc,
    .tp_methods = Loop_methods,
    .tp_members = Loop_members,
};

/* Bumped by changed() whenever an adapter turns on or off or gets its Loop:
 * a wrapper's cached Loop is good while the epoch it was found in lasts. */
static unsigned long long epoch = 1;

/* The active adapter's live Loop (a new reference), else NULL, no error set. */
static Loop *
active_loop(PyObject *adapter, PyObject *slot)
{
    PyObject *a;
    if (adapter != Py_None)
        a = Py_NewRef(adapter);
    else if ((a = PyObject_GetAttr(slot, s_current)) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Loop *L = NULL;
    if (a != Py_None) {
        PyObject *on = PyObject_GetAttr(a, s_active);
        int is_on = on == NULL ? -1 : PyObject_IsTrue(on);
        Py_XDECREF(on);
        if (is_on == 1) {
            PyObject *l = PyObject_GetAttr(a, s_native_loop);
            if (l != NULL && Py_IS_TYPE(l, &LoopType) && ((Loop *)l)->live)
                L = (Loop *)l;
            else
                Py_XDECREF(l);
        }
    }
    Py_DECREF(a);
    PyErr_Clear();
    return L;
}

/* The Loop a wrapper records through: its cached one while the epoch lasts,
 * else looked up (and cached). A new reference, or NULL. */
static Loop *
wrapper_loop(Loop **cached, unsigned long long *seen, PyObject *adapter, PyObject *slot)
{
    if (*cached != NULL && *seen == epoch && (*cached)->live)
        return (Loop *)Py_NewRef(*cached);
    Loop *L = active_loop(adapter, slot);
    Py_XSETREF(*cached, (Loop *)Py_XNewRef(L));
    *seen = epoch;
    return L;
}

/* --------------------------------------------------------------- Counter */

typedef struct {
    PyObject_HEAD
    PyObject *next_step;
    PyObject *first_step;
} Counter;

static int
Counter_init(Counter *C, PyObject *args, PyObject *kw)
{
    static char *names[] = {"first_step", NULL};
    PyObject *first;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &first))
        return -1;
    PyObject *n = PyNumber_Long(first);
    if (n == NULL)
        return -1;
    Py_XSETREF(C->first_step, Py_NewRef(n));
    Py_XSETREF(C->next_step, n);
    return 0;
}

static void
Counter_dealloc(Counter *C)
{
    Py_CLEAR(C->next_step);
    Py_CLEAR(C->first_step);
    Py_TYPE(C)->tp_free((PyObject *)C);
}

static PyMemberDef Counter_members[] = {
    {"next_step", T_OBJECT_EX, offsetof(Counter, next_step), 0,
     "the number the next call records (set it after restoring a checkpoint)"},
    {"first_step", T_OBJECT_EX, offsetof(Counter, first_step), 0, "the first call's number"},
    {NULL}
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goodput_core.record._native.Counter",
    .tp_doc = "The number the next call of a tracked step function records "
              "(integrations/base/steps.py's StepCounter, read here without a lookup).",
    .tp_basicsize = sizeof(Counter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Counter_init,
    .tp_dealloc = (destructor)Counter_dealloc,
    .tp_members = Counter_members,
};

/* The counter's next and first step (new references), or -1 with no error set. */
static int
counter_get(PyObject *counter, PyObject **next, PyObject **first)
{
    if (Py_IS_TYPE(counter, &CounterType)) {
        Counter *C = (Counter *)counter;
        if (C->next_step == NULL || C->first_step == NULL)
            return -1;
        *next = Py_NewRef(C->next_step);
        *first = Py_NewRef(C->first_step);
        return 0;
    }
    *next = PyObject_GetAttr(counter, s_next_step);
    *first = PyObject_GetAttr(counter, s_first_step);
    if (*next == NULL || *first == NULL) {
        Py_CLEAR(*next);
        Py_CLEAR(*first);
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int
counter_set(PyObject *counter, PyObject *next)
{
    if (Py_IS_TYPE(counter, &CounterType)) {
        Py_XSETREF(((Counter *)counter)->next_step, Py_NewRef(next));
        return 0;
    }
    return PyObject_SetAttr(counter, s_next_step, next);
}

/* ----------------------------------------------------------------- Steps */

typedef struct {
    PyObject_HEAD
    PyObject *slow;        /* the Python wrapper: every case but the common one */
    PyObject *func;        /* the step function */
    PyObject *counter;     /* StepCounter: next_step, first_step */
    PyObject *adapter;     /* bound adapter or None */
    PyObject *slot;        /* its framework's AdapterSlot */
    PyObject *sync_every;
    PyObject *dict;
    Loop *cached;
    unsigned long long seen;
    vectorcallfunc vectorcall;
} Steps;

static PyObject *
Steps_call(Steps *S, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Loop *L = wrapper_loop(&S->cached, &S->seen, S->adapter, S->slot);
    if (L == NULL)
        return PyObject_Vectorcall(S->slow, args, nargsf, kwnames);
    long long k, first, every;
    PyObject *ko, *fo, *next = NULL;
    if (counter_get(S->counter, &ko, &fo) == 0) {
        int bad = as_i64(ko, &k) < 0 || as_i64(fo, &first) < 0 || k == LLONG_MAX;
        Py_DECREF(fo);
        next = bad ? NULL : PyLong_FromLongLong(k + 1);
        if (next == NULL || counter_set(S->counter, next) < 0) {
            Py_CLEAR(next);
            Py_DECREF(ko);
        }
    }
    if (next == NULL) {  /* not plain 64-bit ints: the Python wrapper's way */
        PyErr_Clear();
        Py_DECREF(L);
        return PyObject_Vectorcall(S->slow, args, nargsf, kwnames);
    }
    Py_DECREF(next);
    loop_start(L, ko, k);
    Py_DECREF(ko);
    PyObject *result = PyObject_Vectorcall(S->func, args, nargsf, kwnames);
    if (result != NULL) {
        if (S->sync_every == Py_None)
            every = 0;
        else if (PyUnicode_Check(S->sync_every))
            every = L->every;
        else if (as_i64(S->sync_every, &every) < 0)
            every = 0;
        long long count = k + 1 - first;
        if (every > 0 && count % every == 0 && L->live)
            loop_end(L, k);
    }
    Py_DECREF(L);
    return result;
}

static int
Steps_init(Steps *S, PyObject *args, PyObject *kw)
{
    static char *names[] = {"slow", "func", "counter", "adapter", "slot", "sync_every", NULL};
    PyObject *o[6];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "$OOOOOO", names, &o[0], &o[1], &o[2], &o[3],
                                     &o[4], &o[5]))
        return -1;
    if (!PyCallable_Check(o[0]) || !PyCallable_Check(o[1])) {
        PyErr_SetString(PyExc_TypeError, "slow and func must be callable");
        return -1;
    }
    PyObject **dst[6] = {&S->slow, &S->func, &S->counter, &S->adapter, &S->slot,
                         &S->sync_every};
    for (int i = 0; i < 6; i++)
        Py_XSETREF(*dst[i], Py_NewRef(o[i]));
    S->vectorcall = (vectorcallfunc)Steps_call;
    return 0;
}

static int
Steps_traverse(Steps *S, visitproc visit, void *arg)
{
    Py_VISIT(S->slow); Py_VISIT(S->func); Py_VISIT(S->counter); Py_VISIT(S->adapter);
    Py_VISIT(S->slot); Py_VISIT(S->sync_every); Py_VISIT(S->dict); Py_VISIT(S->cached);
    return 0;
}

static int
Steps_clear(Steps *S)
{
    Py_CLEAR(S->slow); Py_CLEAR(S->func); Py_CLEAR(S->counter); Py_CLEAR(S->adapter);
    Py_CLEAR(S->slot); Py_CLEAR(S->sync_every); Py_CLEAR(S->dict); Py_CLEAR(S->cached);
    return 0;
}

static void
Steps_dealloc(Steps *S)
{
    PyObject_GC_UnTrack(S);
    Steps_clear(S);
    Py_TYPE(S)->tp_free((PyObject *)S);
}

static PyObject *
Steps_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);  /* a decorated method binds as a function does */
}

static PyObject *
Steps_tp_call(Steps *S, PyObject *args, PyObject *kw)
{
    if (S->func == NULL) {
        PyErr_SetString(PyExc_TypeError, "Steps not initialised");
        return NULL;
    }
    return PyVectorcall_Call((PyObject *)S, args, kw);
}

static PyGetSetDef Steps_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject StepsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goodput_core.record._native.Steps",
    .tp_doc = "A step function whose each call is the next step (integrations/base/steps.py).",
    .tp_basicsize = sizeof(Steps),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Steps_init,
    .tp_traverse = (traverseproc)Steps_traverse,
    .tp_clear = (inquiry)Steps_clear,
    .tp_dealloc = (destructor)Steps_dealloc,
    .tp_call = (ternaryfunc)Steps_tp_call,
    .tp_vectorcall_offset = offsetof(Steps, vectorcall),
    .tp_descr_get = Steps_get,
    .tp_dictoffset = offsetof(Steps, dict),
    .tp_getset = Steps_getset,
};

/* ----------------------------------------------------------------- Loads */

typedef struct {
    PyObject_HEAD
    PyObject *it;       /* the loader's iterator */
    PyObject *slow;     /* the Python iterator over it: every case but the common one */
    PyObject *adapter;
    PyObject *slot;
    Loop *cached;
    unsigned long long seen;
} Loads;

static PyObject *
Loads_next(Loads *D)
{
    Loop *L = wrapper_loop(&D->cached, &D->seen, D->adapter, D->slot);
    if (L == NULL)
        return Py_TYPE(D->slow)->tp_iternext(D->slow);
    double t0, t1;
    if (now(L, &t0)) {
        Py_DECREF(L);
        return PyIter_Next(D->it);
    }
    PyObject *batch = PyIter_Next(D->it);  /* the end of the data and errors: unrecorded */
    if (batch != NULL) {
        if (now(L, &t1) == 0)
            loop_stall(L, t0, t1);
        else {
            PyErr_SetString(PyExc_ValueError, "the clock gave no finite float");
            failed(L, "stall", "goodput: recording a load failed");
        }
    }
    Py_DECREF(L);
    return batch;
}

static PyObject *
Loads_getattro(Loads *D, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr((PyObject *)D, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError) || D->slow == NULL)
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(D->slow, name);  /* get_state/set_state... of the loader's iterator */
}

static int
Loads_init(Loads *D, PyObject *args, PyObject *kw)
{
    static char *names[] = {"it", "slow", "adapter", "slot", NULL};
    PyObject *o[4];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "$OOOO", names, &o[0], &o[1], &o[2], &o[3]))
        return -1;
    if (!PyIter_Check(o[0]) || !PyIter_Check(o[1])) {
        PyErr_SetString(PyExc_TypeError, "it and slow must be iterators");
        return -1;
    }
    PyObject **dst[4] = {&D->it, &D->slow, &D->adapter, &D->slot};
    for (int i = 0; i < 4; i++)
        Py_XSETREF(*dst[i], Py_NewRef(o[i]));
    return 0;
}

static int
Loads_traverse(Loads *D, visitproc visit, void *arg)
{
    Py_VISIT(D->it); Py_VISIT(D->slow); Py_VISIT(D->adapter); Py_VISIT(D->slot);
    Py_VISIT(D->cached);
    return 0;
}

static int
Loads_clear(Loads *D)
{
    Py_CLEAR(D->it); Py_CLEAR(D->slow); Py_CLEAR(D->adapter); Py_CLEAR(D->slot);
    Py_CLEAR(D->cached);
    return 0;
}

static void
Loads_dealloc(Loads *D)
{
    PyObject_GC_UnTrack(D);
    Loads_clear(D);
    Py_TYPE(D)->tp_free((PyObject *)D);
}

static PyObject *
Loads_iternext(Loads *D)
{
    if (D->it == NULL) {
        PyErr_SetString(PyExc_TypeError, "Loads not initialised");
        return NULL;
    }
    return Loads_next(D);
}

static PyTypeObject LoadsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goodput_core.record._native.Loads",
    .tp_doc = "A loader's iterator whose each next() is timed (integrations/base/data.py).",
    .tp_basicsize = sizeof(Loads),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loads_init,
    .tp_traverse = (traverseproc)Loads_traverse,
    .tp_clear = (inquiry)Loads_clear,
    .tp_dealloc = (destructor)Loads_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Loads_iternext,
    .tp_getattro = (getattrofunc)Loads_getattro,
};

/* ---------------------------------------------------------------- module */

static PyObject *
changed(PyObject *m, PyObject *unused)
{
    epoch++;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"changed", changed, METH_NOARGS,
     "changed(): an adapter turned on or off or got its Loop; wrappers look again."},
    {NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "goodput_core.record._native",
    "A training loop's per-step recording, compiled (record/native.py).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    const char *names[] = {"_emit", "process_index", "progress_thread", "freed",
                           "_registered_in", "current", "active", "native_loop", "next_step",
                           "first_step"};
    PyObject **dst[] = {&s_emit, &s_process_index, &s_progress_thread, &s_freed,
                        &s_registered_in, &s_current, &s_active, &s_native_loop, &s_next_step,
                        &s_first_step};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*dst[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    if (PyType_Ready(&LoopType) < 0 || PyType_Ready(&StepsType) < 0
            || PyType_Ready(&LoadsType) < 0 || PyType_Ready(&CounterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Loop", (PyObject *)&LoopType) < 0
            || PyModule_AddObjectRef(m, "Steps", (PyObject *)&StepsType) < 0
            || PyModule_AddObjectRef(m, "Loads", (PyObject *)&LoadsType) < 0
            || PyModule_AddObjectRef(m, "Counter", (PyObject *)&CounterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
