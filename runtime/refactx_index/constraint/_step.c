/* The compiled half of batch.BatchMatcher: the common per-row work of a step and of its mask.
 *
 * batch.py owns every array (slot state, the arena) and hands them in on each call; nothing
 * is allocated or kept here. Per call, one loop over the step's rows:
 *
 * step_rows  shifts each row's history by the token it wrote; a free row whose history now
 *            ends with a trigger is listed as entering; a row inside a fact whose token is a
 *            child of its node (found by a binary search of the node's sorted children),
 *            whose net of generated facts need not be consulted (not slow), whose prefix has
 *            room, and whose child is inner or an external node already linked to its stored
 *            row, and not a dead end, advances in place. Every other fact row is listed as
 *            rare and left untouched: batch.py steps those with the same numpy code the
 *            fallback uses (crossings into unlinked rows, facts ending, nets, dead ends).
 * mask_rows  lists the constrained rows (inside a fact that may not end here, or dead), and
 *            for those inside a fact and not slow writes their children's ids into one flat
 *            (row, token) index; the others (nets, dead ends) are listed for batch.py.
 *
 * Why compiled: the numpy step makes a constant number of whole-array calls, 0.2-0.3 ms a step
 * even for one row; these loops take well under a microsecond a row, and a step of rows
 * outside any fact allocates nothing (docs/runtime.md, "Serving engines").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { FREE = 0, FACT = 1, DEAD = 2 }; /* matcher.py's modes */

static int view(PyObject *obj, Py_buffer *v, Py_ssize_t item, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0)
        return -1;
    if (v->len % item) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, not a whole number of %zd-byte items", name,
                     v->len, item);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

#define N_STEP 18
static const char *step_names[N_STEP] = {
    "slots", "tokens", "mode", "node", "ends", "slow", "plen", "prefix", "hist",
    "arena_tokens", "arena_child_start", "arena_child_count", "arena_ends", "arena_external", "arena_link",
    "triggers", "rare", "entering",
};
static const Py_ssize_t step_items[N_STEP] = {8, 8, 1, 8, 1, 1, 8, 8, 8, 8, 8, 8, 1, 1, 8, 8, 8, 8};
static const int step_writable[N_STEP] = {0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1};

/* the position of `token` among the sorted ids tokens[lo:lo+n], or -1 */
static inline Py_ssize_t find_child(const int64_t *tokens, Py_ssize_t lo, Py_ssize_t n, int64_t token)
{
    Py_ssize_t a = lo, b = lo + n;
    while (a < b) {
        Py_ssize_t m = a + ((b - a) >> 1);
        if (tokens[m] < token)
            a = m + 1;
        else
            b = m;
    }
    return (a < lo + n && tokens[a] == token) ? a : -1;
}

PyDoc_STRVAR(step_rows_doc,
"step_rows(slots, tokens, mode, node, ends, slow, plen, prefix, hist, arena_tokens, arena_child_start,\n"
"          arena_child_count, arena_ends, arena_external, arena_link, triggers, rare, entering,\n"
"          width, hist_len, arena_size) -> (n_rare, n_entering)\n"
"\n"
"Advance the step's rows in place (module doc). `triggers` holds each trigger as its length\n"
"followed by its ids. `rare` receives the positions (in `slots`) of the fact rows left to\n"
"batch.py, `entering` the slots of free rows that wrote a trigger. (-1, highest slot) when a\n"
"slot is beyond the state arrays (batch.py grows them and calls again; nothing was changed).");

static PyObject *step_rows(PyObject *self, PyObject *args)
{
    PyObject *objs[N_STEP];
    Py_ssize_t width, hist_len, arena_size;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOOnnn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10], &objs[11], &objs[12],
                          &objs[13], &objs[14], &objs[15], &objs[16], &objs[17], &width, &hist_len,
                          &arena_size))
        return NULL;
    Py_buffer v[N_STEP];
    int got = 0;
    for (; got < N_STEP; got++)
        if (view(objs[got], &v[got], step_items[got], step_writable[got], step_names[got]) < 0)
            break;
    PyObject *result = NULL;
    if (got < N_STEP)
        goto done;
    const Py_ssize_t rows = v[0].len / 8, capacity = v[2].len, n_trig = v[15].len / 8;
    if (v[1].len / 8 != rows || v[16].len / 8 < rows || v[17].len / 8 < rows || width < 1 || hist_len < 1
        || v[3].len / 8 != capacity || v[4].len != capacity || v[5].len != capacity || v[6].len / 8 != capacity
        || v[7].len / 8 != capacity * width || v[8].len / 8 != capacity * hist_len || arena_size < 0
        || v[9].len / 8 < arena_size || v[10].len / 8 < arena_size || v[11].len / 8 < arena_size
        || v[12].len < arena_size || v[13].len < arena_size || v[14].len / 8 < arena_size) {
        PyErr_SetString(PyExc_ValueError, "step_rows: the arrays' sizes do not agree");
        goto done;
    }
    const int64_t *slots = v[0].buf, *tokens = v[1].buf;
    int8_t *mode = v[2].buf;
    int64_t *node = v[3].buf, *plen = v[6].buf, *prefix = v[7].buf, *hist = v[8].buf;
    unsigned char *ends = v[4].buf;
    const unsigned char *slow = v[5].buf;
    const int64_t *a_tokens = v[9].buf, *a_start = v[10].buf, *a_count = v[11].buf, *a_link = v[14].buf;
    const unsigned char *a_ends = v[12].buf, *a_ext = v[13].buf;
    const int64_t *triggers = v[15].buf;
    int64_t *rare = v[16].buf, *entering = v[17].buf;

    int64_t highest = -1;
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (slots[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "step_rows: a negative slot");
            goto done;
        }
        if (slots[i] > highest)
            highest = slots[i];
    }
    if (highest >= capacity) {
        result = Py_BuildValue("(nL)", (Py_ssize_t)-1, (long long)highest);
        goto done;
    }
    Py_ssize_t n_rare = 0, n_entering = 0;
    for (Py_ssize_t i = 0; i < rows; i++) {
        const int64_t s = slots[i], t = tokens[i];
        int64_t *h = hist + s * hist_len;
        memmove(h, h + 1, (size_t)(hist_len - 1) * 8);
        h[hist_len - 1] = t;
        if (mode[s] == FREE) {
            for (Py_ssize_t k = 0; k < n_trig;) {
                const int64_t len = triggers[k];
                const int64_t *trig = triggers + k + 1;
                k += 1 + len;
                if (len > hist_len || len < 1)
                    continue;
                if (memcmp(h + hist_len - len, trig, (size_t)len * 8) == 0) {
                    entering[n_entering++] = s;
                    break;
                }
            }
            continue;
        }
        if (mode[s] != FACT)
            continue;
        const int64_t g = node[s], p = plen[s];
        if (slow[s] || g < 0 || g >= arena_size || p >= width) {
            rare[n_rare++] = i;
            continue;
        }
        Py_ssize_t c = find_child(a_tokens, (Py_ssize_t)a_start[g], (Py_ssize_t)a_count[g], t);
        if (c >= 0 && a_ext[c])
            c = (Py_ssize_t)a_link[c];  /* -1: not crossed yet */
        if (c < 0 || c >= arena_size || (!a_ends[c] && a_count[c] == 0)) {
            rare[n_rare++] = i;
            continue;
        }
        prefix[s * width + p] = t;
        plen[s] = p + 1;
        node[s] = c;
        ends[s] = a_ends[c];
    }
    result = Py_BuildValue("(nn)", n_rare, n_entering);
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

#define N_MASK 12
static const char *mask_names[N_MASK] = {
    "slots", "mode", "node", "ends", "slow", "arena_tokens", "arena_child_start", "arena_child_count",
    "rows", "token_rows", "tokens", "others",
};
static const Py_ssize_t mask_items[N_MASK] = {8, 1, 8, 1, 1, 8, 8, 8, 8, 8, 8, 8};
static const int mask_writable[N_MASK] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};

PyDoc_STRVAR(mask_rows_doc,
"mask_rows(slots, mode, node, ends, slow, arena_tokens, arena_child_start, arena_child_count,\n"
"          rows, token_rows, tokens, others, arena_size) -> (n_rows, n_tokens, n_others, max_token)\n"
"\n"
"The step's constrained rows (positions in `slots`) into `rows`; the children of those inside a\n"
"fact and not slow, row by row, into `token_rows`/`tokens`; the other constrained rows into\n"
"`others`. When `tokens` is too small nothing past its end is written and n_tokens says how\n"
"many it must hold (batch.py grows it and calls again). max_token is -1 when n_tokens is 0.");

static PyObject *mask_rows(PyObject *self, PyObject *args)
{
    PyObject *objs[N_MASK];
    Py_ssize_t arena_size;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6], &objs[7], &objs[8], &objs[9], &objs[10], &objs[11], &arena_size))
        return NULL;
    Py_buffer v[N_MASK];
    int got = 0;
    for (; got < N_MASK; got++)
        if (view(objs[got], &v[got], mask_items[got], mask_writable[got], mask_names[got]) < 0)
            break;
    PyObject *result = NULL;
    if (got < N_MASK)
        goto done;
    const Py_ssize_t rows = v[0].len / 8, capacity = v[1].len, room = v[10].len / 8;
    if (v[2].len / 8 != capacity || v[3].len != capacity || v[4].len != capacity || v[8].len / 8 < rows
        || v[11].len / 8 < rows || v[9].len != v[10].len || arena_size < 0 || v[5].len / 8 < arena_size
        || v[6].len / 8 < arena_size || v[7].len / 8 < arena_size) {
        PyErr_SetString(PyExc_ValueError, "mask_rows: the arrays' sizes do not agree");
        goto done;
    }
    const int64_t *slots = v[0].buf, *node = v[2].buf;
    const int8_t *mode = v[1].buf;
    const unsigned char *ends = v[3].buf, *slow = v[4].buf;
    const int64_t *a_tokens = v[5].buf, *a_start = v[6].buf, *a_count = v[7].buf;
    int64_t *out_rows = v[8].buf, *token_rows = v[9].buf, *out_tokens = v[10].buf, *others = v[11].buf;
    for (Py_ssize_t i = 0; i < rows; i++)
        if (slots[i] < 0 || slots[i] >= capacity) {
            PyErr_SetString(PyExc_IndexError, "mask_rows: a slot beyond the state arrays");
            goto done;
        }
    Py_ssize_t n_rows = 0, n_tokens = 0, n_others = 0;
    int64_t max_token = -1;
    for (Py_ssize_t i = 0; i < rows; i++) {
        const int64_t s = slots[i];
        const int m = mode[s];
        if (!((m == FACT && !ends[s]) || m == DEAD))
            continue;
        out_rows[n_rows++] = i;
        const int64_t g = node[s];
        if (m != FACT || slow[s] || g < 0 || g >= arena_size) {
            others[n_others++] = i;
            continue;
        }
        const int64_t *children = a_tokens + a_start[g];
        const Py_ssize_t count = (Py_ssize_t)a_count[g];
        for (Py_ssize_t k = 0; k < count; k++, n_tokens++) {
            if (children[k] > max_token)
                max_token = children[k];
            if (n_tokens < room) {
                token_rows[n_tokens] = i;
                out_tokens[n_tokens] = children[k];
            }
        }
    }
    result = Py_BuildValue("(nnnL)", n_rows, n_tokens, n_others, (long long)max_token);
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"step_rows", step_rows, METH_VARARGS, step_rows_doc},
    {"mask_rows", mask_rows, METH_VARARGS, mask_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "refactx_index.constraint._step",
    "The compiled per-row work of the batch matcher's step and mask (batch.BatchMatcher).", -1, methods,
};

PyMODINIT_FUNC PyInit__step(void)
{
    return PyModule_Create(&module);
}
