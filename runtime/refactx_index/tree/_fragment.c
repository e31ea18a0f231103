/* The compiled half of format.decode_fragment: a row's inflated body -> its node arrays.
 *
 * format.py checks the header, the crc32 and the bounds, and inflates the body; this fills
 * arrays it has allocated (int64 tokens and leaves, int32 child_start and child_count, uint8
 * ends and external) in a few linear passes, with the same checks as the numpy decoder, in
 * its order, so both accept and refuse the same rows and fill the same values. Nothing is
 * allocated here and nothing is kept between calls.
 *
 * Why compiled: the numpy decoder makes some forty whole-array calls per row, and the rows a
 * walk enters first (the ones that pay a round trip) are the large ones: 0.1-1 ms of numpy
 * per row where these passes take microseconds (docs/runtime.md, "The tail on the realistic
 * preset").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* error codes: format.py maps them to the numpy decoder's messages */
enum {
    OK = 0,
    TRUNCATED = 1,
    LENGTH_MISMATCH = 2,
    COUNTS_INCONSISTENT = 3,
    NODE_BEFORE_PARENT = 4,
    SIBLINGS_UNSORTED = 5,
    TOO_DEEP = 6,
    NO_FACT_BELOW = 7,
    LEAVES_OUT_OF_RANGE = 8,
};

static inline uint64_t read_le(const unsigned char *p, int width)
{
    uint64_t v = 0;
    for (int b = width - 1; b >= 0; b--)
        v = (v << 8) | p[b];
    return v;
}

/* np.unpackbits order: node i is bit 7 - i % 8 of byte i / 8 */
static inline int bit(const unsigned char *bits, Py_ssize_t i)
{
    return (bits[i >> 3] >> (7 - (i & 7))) & 1;
}

static int decode(const unsigned char *body, Py_ssize_t body_len, int tw, int cw, int lw,
                  Py_ssize_t n, long max_levels, uint64_t max_leaves, int64_t *tokens, int32_t *child_start,
                  int32_t *child_count, unsigned char *ends, unsigned char *external,
                  int64_t *leaves)
{
    Py_ssize_t nb = (n + 7) / 8;
    Py_ssize_t off_tokens = 0, off_counts = tw * (n - 1), off_ends = off_counts + cw * n;
    Py_ssize_t off_ext = off_ends + nb, off_leaves = off_ext + nb;
    if (body_len < off_leaves)
        return TRUNCATED;
    const unsigned char *ext_bits = body + off_ext, *end_bits = body + off_ends;
    Py_ssize_t n_ext = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        external[i] = (unsigned char)bit(ext_bits, i);
        ends[i] = (unsigned char)bit(end_bits, i);
        n_ext += external[i];
    }
    if (body_len != off_leaves + lw * n_ext)
        return LENGTH_MISMATCH;

    /* child counts sum to n - 1 and external nodes have none; a count above n - 1 is
     * inconsistent on its own (and keeps the sums below from overflowing) */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t c = read_le(body + off_counts + (Py_ssize_t)cw * i, cw);
        if (c > (uint64_t)(n - 1) || (c && external[i]))
            return COUNTS_INCONSISTENT;
        child_count[i] = (int32_t)c;  /* at most n - 1 < 2^21 */
        total += (Py_ssize_t)c;
    }
    if (total != n - 1)
        return COUNTS_INCONSISTENT;

    tokens[0] = -1;
    for (Py_ssize_t i = 1; i < n; i++)
        tokens[i] = (int64_t)read_le(body + off_tokens + (Py_ssize_t)tw * (i - 1), tw);

    /* BFS: every node's children come after it, siblings strictly increasing */
    Py_ssize_t start = 1;
    for (Py_ssize_t p = 0; p < n; p++) {
        child_start[p] = (int32_t)start;  /* at most n */
        Py_ssize_t c = (Py_ssize_t)child_count[p];
        if (c && start <= p)
            return NODE_BEFORE_PARENT;
        start += c;
    }
    for (Py_ssize_t p = 0; p < n; p++) {
        Py_ssize_t s = (Py_ssize_t)child_start[p], e = s + (Py_ssize_t)child_count[p];
        for (Py_ssize_t i = s + 1; i < e; i++)
            if (tokens[i] <= tokens[i - 1])
                return SIBLINGS_UNSORTED;
    }

    const unsigned char *ext_leaves = body + off_leaves;
    for (Py_ssize_t k = 0; k < n_ext; k++)
        if (read_le(ext_leaves + (Py_ssize_t)lw * k, lw) > max_leaves)
            return LEAVES_OUT_OF_RANGE;

    /* depth: BFS puts each level's nodes together, and the children of a level's nodes
     * [s, e) are the next level, [child_start[s], child_start[e - 1] + child_count[e - 1]):
     * a row deeper than max_levels is found by walking its levels, at most max_levels + 1 */
    Py_ssize_t s = 0, e = 1;
    for (long level = 0; s < e; level++) {
        if (level > max_levels)
            return TOO_DEEP;
        Py_ssize_t next_s = (Py_ssize_t)child_start[s];
        e = (Py_ssize_t)(child_start[e - 1] + child_count[e - 1]);
        s = next_s;
    }

    /* leaves: own facts (an end, an external node's stored count, at most max_leaves) plus
     * the children's, summed from the last node back (children come after their parent):
     * at most 2^21 nodes of 2^40 facts each, no overflow */
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t own = ends[i];
        if (external[i])
            own += read_le(ext_leaves + (Py_ssize_t)lw * k++, lw);
        leaves[i] = (int64_t)own;
    }
    for (Py_ssize_t p = n - 1; p >= 0; p--) {
        Py_ssize_t s = (Py_ssize_t)child_start[p], e = s + (Py_ssize_t)child_count[p];
        uint64_t sum = (uint64_t)leaves[p];
        for (Py_ssize_t i = s; i < e; i++)
            sum += (uint64_t)leaves[i];
        leaves[p] = (int64_t)sum;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (leaves[i] < 1)
            return NO_FACT_BELOW;
    return OK;
}

static int writable(PyObject *obj, Py_buffer *view, Py_ssize_t bytes, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len != bytes) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd expected", name, view->len, bytes);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(decode_body_doc,
"decode_body(body, tw, cw, lw, n, max_levels, max_leaves, tokens, child_start, child_count, ends,\n"
"            external, leaves) -> int\n"
"\n"
"Fill the six node arrays (int64 tokens and leaves, int32 child_start and child_count, uint8\n"
"ends and external; n each, C-contiguous) from an inflated row\n"
"body; returns 0, or the code of the first check the row fails (format.py's messages).");

static PyObject *decode_body(PyObject *self, PyObject *args)
{
    Py_buffer body;
    int tw, cw, lw;
    Py_ssize_t n;
    long max_levels;
    unsigned long long max_leaves;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "y*iiinlKOOOOOO", &body, &tw, &cw, &lw, &n, &max_levels, &max_leaves,
                          &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    if (n < 1 || (tw != 1 && tw != 2 && tw != 3 && tw != 4 && tw != 8) || (cw != 1 && cw != 2 && cw != 4 && cw != 8)
        || (lw != 1 && lw != 2 && lw != 4 && lw != 8)) {
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_ValueError, "widths must be 1, 2, 4 or 8 (tokens: also 3) and n at least 1");
        return NULL;
    }
    static const char *names[6] = {"tokens", "child_start", "child_count", "ends", "external", "leaves"};
    const Py_ssize_t item[6] = {8, 4, 4, 1, 1, 8};
    Py_buffer views[6];
    int got = 0;
    for (; got < 6; got++)
        if (writable(objs[got], &views[got], n * item[got], names[got]) < 0)
            break;
    int code = -1;
    if (got == 6) {
        Py_BEGIN_ALLOW_THREADS
        code = decode((const unsigned char *)body.buf, body.len, tw, cw, lw, n, max_levels, max_leaves,
                      (int64_t *)views[0].buf, (int32_t *)views[1].buf, (int32_t *)views[2].buf,
                      (unsigned char *)views[3].buf, (unsigned char *)views[4].buf,
                      (int64_t *)views[5].buf);
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyBuffer_Release(&body);
    if (code < 0)  /* an argument was not a writable buffer of the right size */
        return NULL;
    return PyLong_FromLong(code);
}

static PyMethodDef methods[] = {
    {"decode_body", decode_body, METH_VARARGS, decode_body_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "refactx_index.tree._fragment",
    "The compiled decoder of a row's inflated body (format.decode_fragment).", -1, methods,
};

PyMODINIT_FUNC PyInit__fragment(void)
{
    return PyModule_Create(&module);
}
