/* lading.disk._native: a batch of ids -> rows -> texts, in C (optional; see native.py).
 *
 * Why: at 64 ids a batch, numpy's fixed cost per call (~1 us, a dozen calls a batch) and a Python
 * iteration per document (slice the map into bytes, then decode) cost more than the memory
 * reads themselves. Here one call walks the whole batch in phases -- parse every id, then read
 * every table entry, then every key, then every offset, then decode -- and prefetches the next
 * phase's cache lines, so the batch's cache misses overlap instead of coming one after another.
 *
 * Safety: every row, offset and table entry read from the files is checked against the
 * buffer it indexes before it is used (a damaged file raises, never reads stray memory); the
 * buffers are held (Py_buffer) for the whole call. Offsets and table words are little-endian:
 * native.py only loads this module on a little-endian machine. Rows a dense or sorted index
 * returns are only checked to be >= 0 (a hash row must name one of the keys); texts() checks
 * them against the column it reads.
 *
 * Ids (the same rule as the numpy path in lading.stores.index / hashindex): an exact int, or a
 * numpy integer (the type registered by configure()), is that integer; a str is its UTF-8; any
 * other object is str(object).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define CHUNK 32 /* ids per phase (8, 16, 32, 64 measured alike; 32 bounds the stack arrays) */
/* bytes of each text prefetched before the decodes: 64 -> 1024 took a batch of 64 passages
 * (~350 B) from 18.1 to 14.9 us; on 6.5 KB documents 1024 did best (70.8 us, 4096: 76.0) */
#define PREFETCH_BYTES 1024
#define SLOTS 8 /* uint64 slots per hash bucket (one 64-byte cache line) */
#ifndef LADING_SOURCE_SHA256 /* setup.py defines it: sha256 of this file (native.py checks it) */
#define LADING_SOURCE_SHA256 ""
#endif
#define MAX_CANONICAL 1000000000000000000LL /* 10**18: canonical ints have <= 18 digits */

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)
#else
#define PREFETCH(p) ((void)0)
#endif

static PyObject *numpy_integer = NULL; /* numpy.integer, or NULL before configure() */
static PyObject *Damaged = NULL;       /* _native.Damaged(ValueError): a file's words are wrong */

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* ---- ids ----------------------------------------------------------------------------- */

/* A new reference to the object an id stands for: an int for ints and numpy integers, a str
 * for str (the id itself), str(id) for another int (a bool: "True", not 1); None for an object
 * that is no id (None, a float, bytes, numpy's bool_: stores.base.is_id), which no lookup
 * finds, as `in` says. NULL with an exception set on error. */
static PyObject *id_value(PyObject *id) {
    if (PyLong_CheckExact(id) || PyUnicode_Check(id)) {
        Py_INCREF(id);
        return id;
    }
    if (numpy_integer != NULL) {
        int is_int = PyObject_IsInstance(id, numpy_integer);
        if (is_int < 0) return NULL;
        if (is_int) return PyNumber_Index(id);
    }
    if (PyLong_Check(id)) return PyObject_Str(id);
    Py_RETURN_NONE;
}

/* The canonical non-negative integer a str spells ("7", not "07", " 7", "+7" or "٧"). */
static int parse_canonical(PyObject *s, int64_t *out) {
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) return -1;
#endif
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (!PyUnicode_IS_ASCII(s) || n < 1 || n > 18) return 0;
    const char *p = (const char *)PyUnicode_DATA(s);
    if (p[0] == '0' && n > 1) return 0;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

/* 1 and the id's integer key in *out when it is a canonical integer below 10**18, 0 when it
 * cannot be in an integer index, -1 on error. */
static int int_key(PyObject *id, int64_t *out) {
    if (PyUnicode_Check(id)) return parse_canonical(id, out);
    PyObject *value = id_value(id);
    if (value == NULL) return -1;
    int found = 0;
    if (PyLong_Check(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) found = -1;
        else if (!overflow && v >= 0 && v < MAX_CANONICAL) {
            *out = v;
            found = 1;
        }
    } else if (PyUnicode_Check(value)) {
        found = parse_canonical(value, out);
    }
    Py_DECREF(value);
    return found;
}

/* The ids as a tuple of their own: str() or __index__ of an odd id runs Python code, which
 * must not be able to resize the caller's list under this loop (PyList_AsTuple: a copy of the
 * pointers, ~0.2 us for 64 ids). */
static PyObject *id_tuple(PyObject *ids) {
    return PyList_CheckExact(ids) ? PyList_AsTuple(ids) : PySequence_Tuple(ids);
}

/* The ids as a tuple (*seq) and a bytearray for their int64 rows (*rows, *out); 0, or -1 with
 * an exception set. */
static int start_rows(PyObject *ids, PyObject **seq, PyObject **rows, int64_t **out) {
    *seq = id_tuple(ids);
    if (*seq == NULL) return -1;
    *rows = PyByteArray_FromStringAndSize(NULL, PyTuple_GET_SIZE(*seq) * 8);
    if (*rows == NULL) return -1;
    *out = (int64_t *)PyByteArray_AS_STRING(*rows);
    return 0;
}

/* The rows result: a bytearray of n int64 rows (-1 where absent) and the first absent position
 * (-1 when none); steals rows. */
static PyObject *rows_result(PyObject *rows, Py_ssize_t first_missing) {
    return Py_BuildValue("(Nn)", rows, first_missing);
}

/* ---- one batch walk for every kind of index --------------------------------------------- */

/* One id of a batch as an index kind looks it up. */
typedef struct {
    int64_t number;           /* int kinds: the id's integer key (-1: none) */
    const unsigned char *key; /* hash kinds: UTF-8 bytes of the id (NULL: cannot be in the index) */
    Py_ssize_t len;
    uint64_t hash;
    int64_t bucket;
    int64_t row;                 /* hash kinds: the first candidate's row (-1: none) */
    int64_t at;                  /* hash-ids: the first candidate's slot */
    const unsigned char *stored; /* hash-ids: the first candidate's key */
    Py_ssize_t stored_width;     /* hash-ids: its width */
} Probe;

/* An index kind as lookup_rows() walks a batch (t: the kind's table). probe_of(t, id, p, hold)
 * parses id into probe p (*hold: a new object p's key points into, or left NULL) and
 * prefetches where its lookup starts: 0, or -1 with an exception set. chunk_rows(t, probe,
 * out, m) sets out[j] to the row of probe[j] (-1: absent) for a chunk of m probes, in phases
 * of its own: 0, or -1 with the exception set (damaged). */
typedef int (*ProbeOf)(const void *t, PyObject *id, Probe *p, PyObject **hold);
typedef int (*ChunkRows)(const void *t, Probe *probe, int64_t *out, Py_ssize_t m);

#if defined(__GNUC__) || defined(__clang__)
#define INLINE_ALWAYS inline __attribute__((always_inline))
#else
#define INLINE_ALWAYS inline
#endif

/* The rows of ids (start_rows, rows_result) in an index of any kind, CHUNK ids at a time: every
 * id parsed (its first cache line prefetched), then the kind's phases over the chunk, so the
 * chunk's cache misses overlap. Inlined into each kind's entry point: the kind's calls are
 * direct there. NULL with an exception set on error. */
static INLINE_ALWAYS PyObject *lookup_rows(PyObject *ids, const void *t, ProbeOf probe_of,
                                           ChunkRows chunk_rows) {
    PyObject *result = NULL, *seq = NULL, *rows = NULL;
    PyObject *hold[CHUNK] = {NULL};
    int64_t *out;
    if (start_rows(ids, &seq, &rows, &out) < 0) goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    Py_ssize_t first_missing = -1;
    Probe probe[CHUNK];
    for (Py_ssize_t lo = 0; lo < n; lo += CHUNK) {
        Py_ssize_t m = (lo + CHUNK < n ? lo + CHUNK : n) - lo;
        for (Py_ssize_t j = 0; j < m; j++)
            if (probe_of(t, items[lo + j], &probe[j], &hold[j]) < 0) goto done;
        if (chunk_rows(t, probe, out + lo, m) < 0) goto done;
        for (Py_ssize_t j = 0; j < m; j++) {
            if (out[lo + j] < 0 && first_missing < 0) first_missing = lo + j;
            Py_CLEAR(hold[j]);
        }
    }
    result = rows_result(rows, first_missing);
    rows = NULL;
done:
    for (int j = 0; j < CHUNK; j++) Py_XDECREF(hold[j]);
    Py_XDECREF(rows);
    Py_XDECREF(seq);
    return result;
}

/* ---- dense: table[id] is the row (-1 for a hole) --------------------------------------- */

static int64_t table_row(const unsigned char *table, Py_ssize_t itemsize, int64_t i) {
    if (itemsize == 4) {
        int32_t v;
        memcpy(&v, table + i * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, table + i * 8, 8);
    return v;
}

typedef struct {
    const unsigned char *table;
    Py_ssize_t itemsize;
    int64_t size;
} DenseTable;

/* The dense kind (lookup_rows): the id's entry of the table prefetched, then read. */
static int dense_probe(const void *table, PyObject *id, Probe *p, PyObject **hold) {
    const DenseTable *t = table;
    int64_t key = -1;
    int found = int_key(id, &key);
    if (found < 0) return -1;
    p->number = found && key < t->size ? key : -1;
    if (p->number >= 0) PREFETCH(t->table + p->number * t->itemsize);
    return 0;
}

static int dense_chunk(const void *table, Probe *probe, int64_t *out, Py_ssize_t m) {
    const DenseTable *t = table;
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t row = -1;
        if (probe[j].number >= 0) {
            row = table_row(t->table, t->itemsize, probe[j].number);
            if (row < 0) row = -1;
        }
        out[j] = row;
    }
    return 0;
}

static PyObject *dense_rows(PyObject *self, PyObject *args) {
    PyObject *ids;
    Py_buffer table;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "Oy*n", &ids, &table, &itemsize)) return NULL;
    PyObject *result = NULL;
    if (itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "row itemsize must be 4 or 8");
    } else {
        DenseTable t = {(const unsigned char *)table.buf, itemsize, table.len / itemsize};
        result = lookup_rows(ids, &t, dense_probe, dense_chunk);
    }
    PyBuffer_Release(&table);
    return result;
}

/* ---- sorted-int: keys ascending, rows beside them; binary search -------------------------- */

/* Each base[j] (a position in k[0..size)) becomes the last position whose key <= want[j] within
 * base[j] .. base[j] + span - 1 (a probe past size counts as a larger key). The searches of
 * the chunk go one halving at a time: the probes of one level are independent, so their cache
 * misses overlap (each prefetched one level ahead). */
static void search(const int64_t *k, int64_t size, int64_t span, int64_t *base,
                   const int64_t *want, Py_ssize_t m) {
    while (span > 1) {
        int64_t half = span / 2, next = (span - half) / 2;
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t b = base[j] + half;
            if (b < size && k[b] <= want[j]) base[j] = b;
            if (base[j] + next < size) PREFETCH(&k[base[j] + next]);
        }
        span -= half;
    }
}

typedef struct {
    const int64_t *keys; /* int64 little-endian, mapped aligned */
    const unsigned char *table;
    Py_ssize_t itemsize;
    int64_t size;
} SortedTable;

/* The sorted kind (lookup_rows): the chunk's searches side by side, then their rows. */
static int sorted_probe(const void *table, PyObject *id, Probe *p, PyObject **hold) {
    int64_t key = -1;
    int found = int_key(id, &key);
    if (found < 0) return -1;
    p->number = found ? key : -1;
    return 0;
}

/* The chunk's keys (want) and, in base, each one's last position whose key <= it in k[0..size)
 * (0 where none is): the searches of the sorted and runs kinds. */
static void search_chunk(const int64_t *k, int64_t size, const Probe *probe, int64_t *want,
                         int64_t *base, Py_ssize_t m) {
    for (Py_ssize_t j = 0; j < m; j++) {
        want[j] = probe[j].number;
        base[j] = 0;
    }
    search(k, size, size, base, want, m);
}

static int sorted_chunk(const void *table, Probe *probe, int64_t *out, Py_ssize_t m) {
    const SortedTable *t = table;
    int64_t want[CHUNK], base[CHUNK];
    search_chunk(t->keys, t->size, probe, want, base, m);
    for (Py_ssize_t j = 0; j < m; j++) PREFETCH(t->table + base[j] * t->itemsize);
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t row = -1, b = base[j];
        if (t->size > 0 && want[j] >= 0 && t->keys[b] == want[j]) {
            row = table_row(t->table, t->itemsize, b);
            if (row < 0) row = -1;
        }
        out[j] = row;
    }
    return 0;
}

static PyObject *sorted_rows(PyObject *self, PyObject *args) {
    PyObject *ids;
    Py_buffer keys, table;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "Oy*y*n", &ids, &keys, &table, &itemsize)) return NULL;
    PyObject *result = NULL;
    if (itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "row itemsize must be 4 or 8");
    } else {
        int64_t size = keys.len / 8;
        if (table.len / itemsize < size) size = table.len / itemsize;
        SortedTable t = {(const int64_t *)keys.buf, (const unsigned char *)table.buf, itemsize,
                         size};
        result = lookup_rows(ids, &t, sorted_probe, sorted_chunk);
    }
    PyBuffer_Release(&keys);
    PyBuffer_Release(&table);
    return result;
}

/* ---- runs: integer ids in runs of consecutive values ------------------------------------ */

typedef struct {
    const int64_t *firsts;  /* each run's first id, ascending */
    const int64_t *rows;    /* the row of that first id */
    const int64_t *lengths; /* ids in the run */
    int64_t size;           /* runs */
} RunsTable;

/* The runs kind (lookup_rows): the chunk's searches for the last run starting at or before the
 * id side by side (sorted_probe parses), then the row if the id falls inside that run. */
static int runs_chunk(const void *table, Probe *probe, int64_t *out, Py_ssize_t m) {
    const RunsTable *t = table;
    int64_t want[CHUNK], base[CHUNK];
    search_chunk(t->firsts, t->size, probe, want, base, m);
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t row = -1, b = base[j];
        if (t->size > 0 && want[j] >= 0 && t->firsts[b] <= want[j]) {
            int64_t off = want[j] - t->firsts[b];
            if (off < t->lengths[b] && t->rows[b] >= 0 && t->rows[b] <= INT64_MAX - off)
                row = t->rows[b] + off;
        }
        out[j] = row;
    }
    return 0;
}

/* runs: the runs' firsts, then their rows, then their lengths (int64 each; len / 24 runs, a
 * trailing partial run ignored). */
static PyObject *runs_rows(PyObject *self, PyObject *args) {
    PyObject *ids;
    Py_buffer runs;
    if (!PyArg_ParseTuple(args, "Oy*", &ids, &runs)) return NULL;
    int64_t count = runs.len / 24;
    const int64_t *words = (const int64_t *)runs.buf;
    RunsTable t = {words, words + count, words + 2 * count, count};
    PyObject *result = lookup_rows(ids, &t, sorted_probe, runs_chunk);
    PyBuffer_Release(&runs);
    return result;
}

/* ---- hash: see lading/stores/hashindex.py for the table; the same hash, bit for bit ----- */

static const uint64_t SEED = 0x9E3779B97F4A7C15ULL, MUL = 0xFF51AFD7ED558CCDULL,
                      FIN = 0xC4CEB9FE1A85EC53ULL;

/* The hash of hashindex.hash_words: the key's zero padding adds nothing to the sum. */
static uint64_t hash_key(const unsigned char *p, Py_ssize_t len, const uint64_t *mult) {
    uint64_t h = 0;
    Py_ssize_t full = len / 8, i = 0;
    for (; i < full; i++) h += load64(p + 8 * i) * mult[i];
    if (len % 8) {
        unsigned char last[8] = {0};
        memcpy(last, p + 8 * i, len % 8);
        h += load64(last) * mult[i];
    }
    h ^= SEED;
    h ^= h >> 33;
    h *= MUL;
    h ^= h >> 33;
    h *= FIN;
    h ^= h >> 33;
    return h;
}

/* Whether stored key `stored` (width bytes, zero-padded) is exactly `key`. */
static int same_key(const unsigned char *stored, const unsigned char *key, Py_ssize_t len,
                    Py_ssize_t width) {
    if (memcmp(stored, key, len) != 0) return 0;
    for (Py_ssize_t i = len; i < width; i++)
        if (stored[i]) return 0;
    return 1;
}

typedef struct {
    const uint64_t *table;
    int64_t buckets;
    const unsigned char *keys;
    int64_t nkeys;
    Py_ssize_t width;
    Py_ssize_t max_spill;
    const uint64_t *factors; /* the hash's word multipliers */
} HashTable;

#define PAST_KEYS (-2) /* a slot with the probe's tag names a row past the keys: damaged */

/* The row slot e holds for tag: -1 for another tag or an empty slot, else its row (PAST_KEYS
 * when that is not a row of the keys). */
static int64_t slot_row(const HashTable *t, uint64_t e, uint64_t tag) {
    int64_t row = (int64_t)(e & 0xFFFFFFFFULL) - 1;
    if ((e >> 32) != tag || row < 0) return -1;
    return row < t->nkeys ? row : PAST_KEYS;
}

/* The row of probe p: every slot of its bucket and of the buckets it may have spilled to, each
 * bucket read whole as the numpy route reads it (the same damage seen, the same match kept). */
static int64_t hash_find(const HashTable *t, const Probe *p) {
    uint64_t tag = p->hash >> 32;
    int64_t b = p->bucket;
    for (Py_ssize_t step = 0; step <= t->max_spill; step++) {
        const uint64_t *slot = t->table + b * SLOTS;
        int64_t found = -1;
        for (int s = 0; s < SLOTS; s++) {
            int64_t row = slot_row(t, slot[s], tag);
            if (row == PAST_KEYS) return PAST_KEYS;
            if (row >= 0 && same_key(t->keys + row * t->width, p->key, p->len, t->width))
                found = row;
        }
        if (found >= 0) return found;
        if ((slot[SLOTS - 1] & 0xFFFFFFFFULL) == 0) return -1; /* not full: nothing spilled */
        b = (b + 1) % t->buckets;
    }
    return -1;
}

/* The first row of p's home bucket whose tag matches (-1: none; PAST_KEYS), for the fast pass. */
static int64_t hash_candidate(const HashTable *t, const Probe *p) {
    const uint64_t *slot = t->table + p->bucket * SLOTS;
    for (int s = 0; s < SLOTS; s++) {
        int64_t row = slot_row(t, slot[s], p->hash >> 32);
        if (row != -1) return row;
    }
    return -1;
}

/* Fill probe p from id: its UTF-8 key (held in *hold when a new object had to be made), the
 * key's hash under the index's factors and its home among the index's buckets (p->key NULL:
 * an id no key of this width can be, or an object that is no id). */
static int hash_key_of(PyObject *id, Probe *p, PyObject **hold, Py_ssize_t width,
                       const uint64_t *factors, int64_t buckets) {
    PyObject *value = PyUnicode_Check(id) ? (Py_INCREF(id), id) : id_value(id);
    if (value == NULL) return -1;
    if (PyLong_Check(value)) {
        PyObject *text = PyObject_Str(value);
        Py_DECREF(value);
        if (text == NULL) return -1;
        value = text;
    }
    *hold = value;
    p->key = NULL;
    if (!PyUnicode_Check(value)) return 0;
    const char *utf8 = PyUnicode_AsUTF8AndSize(value, &p->len);
    if (utf8 == NULL) { /* a lone surrogate: not UTF-8, so not an id of any store */
        PyErr_Clear();
        return 0;
    }
    /* stored keys are zero-padded and ids hold no NUL (sources refuse them): an id longer than
     * the widest key or holding a NUL cannot be present */
    if (p->len > width || memchr(utf8, 0, p->len) != NULL) return 0;
    p->key = (const unsigned char *)utf8;
    p->hash = hash_key(p->key, p->len, factors);
    p->bucket = (int64_t)(((p->hash & 0xFFFFFFFFULL) * (uint64_t)buckets) >> 32);
    return 0;
}

/* The hash kind (lookup_rows): the home bucket (SLOTS slots, one cache line) prefetched; then
 * each first candidate's key; then each key confirmed, or every slot searched (a spill). */
static int hash_probe(const void *table, PyObject *id, Probe *p, PyObject **hold) {
    const HashTable *t = table;
    if (hash_key_of(id, p, hold, t->width, t->factors, t->buckets) < 0) return -1;
    if (p->key != NULL) PREFETCH(t->table + p->bucket * SLOTS);
    return 0;
}

static int hash_chunk(const void *table, Probe *probe, int64_t *out, Py_ssize_t m) {
    const HashTable *t = table;
    for (Py_ssize_t j = 0; j < m; j++) {
        Probe *p = &probe[j];
        p->row = p->key == NULL ? -1 : hash_candidate(t, p);
        if (p->row == PAST_KEYS) goto damaged;
        if (p->row >= 0) PREFETCH(t->keys + p->row * t->width);
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        Probe *p = &probe[j];
        int64_t row = -1;
        if (p->key != NULL) {
            if (p->row >= 0 && same_key(t->keys + p->row * t->width, p->key, p->len, t->width))
                row = p->row;
            else if ((row = hash_find(t, p)) == PAST_KEYS)
                goto damaged;
        }
        out[j] = row;
    }
    return 0;
damaged:
    PyErr_Format(Damaged, "a slot names a row past the %lld keys", (long long)t->nkeys);
    return -1;
}

static PyObject *hash_rows(PyObject *self, PyObject *args) {
    PyObject *ids;
    Py_buffer table, keys, mult;
    Py_ssize_t width, buckets, max_spill;
    if (!PyArg_ParseTuple(args, "Oy*y*nnny*", &ids, &table, &keys, &width, &buckets, &max_spill,
                          &mult))
        return NULL;
    PyObject *result = NULL;
    /* sizes by division: buckets * 64 from a damaged meta could wrap past 2**64 (and pass); a
     * spill is at most buckets - 1 (each step moves to the next bucket, and one has room) */
    if (width < 8 || width % 8 || buckets < 1 || max_spill < 0 || max_spill >= buckets ||
        table.len / (SLOTS * 8) < buckets || mult.len / 8 < width / 8) {
        PyErr_SetString(Damaged, "hash index: table or width does not match its meta");
    } else {
        HashTable t = {(const uint64_t *)table.buf, buckets, (const unsigned char *)keys.buf,
                       keys.len / width, width, max_spill, (const uint64_t *)mult.buf};
        result = lookup_rows(ids, &t, hash_probe, hash_chunk);
    }
    PyBuffer_Release(&table);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&mult);
    return result;
}

/* ---- rows of a ragged column: texts (new str) and slices (views) --------------------------- */

/* A column's rows are read over one or several parts (the data of a store built in shards is a
 * file per shard), through either one offsets array over the parts laid end to end (count + 1
 * little-endian uint64, in items: a one-part column, or a store merged before merges stopped
 * writing them) or one offsets array per part, each over its own part's data. With one array, a
 * row's part is the one its start falls in (a row that starts where a part ends belongs to the
 * next one, as np.searchsorted(side="right") over the inner bounds gives it); with one per part,
 * the part is the one whose rows hold it, searched over the parts' first rows. */
typedef struct {
    Py_ssize_t n;
    int32_t *part;   /* part of each row */
    uint64_t *start; /* offsets of each row within its part, in items */
    uint64_t *end;
} Spans;

static void spans_free(Spans *s) {
    PyMem_Free(s->part);
    PyMem_Free(s->start);
    PyMem_Free(s->end);
}

/* A buffer or a tuple of buffers, held for one call, with the running sum of a count of each
 * (sums[0] = 0, sums[n] = the total): a column's data parts (their bytes) or its offsets
 * arrays (their rows: a buffer of k + 1 uint64 offsets holds k rows). */
typedef struct {
    Py_ssize_t n; /* buffers held */
    Py_buffer *views;
    uint64_t *sums; /* n + 1 */
    int borrowed;   /* views and sums are a Parts object's, held for its life: not released */
    const int32_t *index; /* of rows: a Parts object's (part_of), or NULL */
    int shift;
} Buffers;

static void buffers_release(Buffers *b) {
    if (b->borrowed) return;
    for (Py_ssize_t i = 0; i < b->n; i++) PyBuffer_Release(&b->views[i]);
    PyMem_Free(b->views);
    PyMem_Free(b->sums);
}

/* Parts: a tuple of buffers held once, for many calls (a store's shards' maps): a call given
 * one takes no buffer of its own, where a tuple costs a PyObject_GetBuffer a buffer a call
 * (2,000 shards: ~2 x 2,000 a get_many of 64 ids). Holding them keeps every map exported, so
 * none is closed under a call. */
typedef struct {
    PyObject_HEAD
    Buffers held;   /* sums in bytes */
    uint64_t *rows; /* n + 1: sums in rows of offsets (k + 1 uint64 hold k rows) */
    int32_t *row_index; /* the part of each bucket of 2**row_shift rows' first row (or NULL) */
    int row_shift;
} PartsObject;

static int buffers_hold(Buffers *b, PyObject *arg, int rows, const char *what);
static int part_index(PartsObject *self);
static Py_ssize_t last_at_most(const uint64_t *a, Py_ssize_t n, uint64_t v);

static void parts_dealloc(PartsObject *self) {
    self->held.borrowed = 0;
    buffers_release(&self->held);
    PyMem_Free(self->rows);
    PyMem_Free(self->row_index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t parts_length(PartsObject *self) { return self->held.n; }

static PySequenceMethods parts_as_sequence = {(lenfunc)parts_length};

static PyObject *parts_new(PyTypeObject *type, PyObject *args, PyObject *kwds);

static PyTypeObject PartsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lading.disk._native.Parts",
    .tp_basicsize = sizeof(PartsObject),
    .tp_dealloc = (destructor)parts_dealloc,
    .tp_as_sequence = &parts_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Parts(buffers): a tuple of buffers held for the object's life, passed in place "
              "of the tuple as the data of texts() and bytes_of(), the offsets of those and of "
              "slices(), and the keys of hash_ids_rows()",
    .tp_new = parts_new,
};

static PyObject *parts_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *tuple;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "Parts() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &tuple)) return NULL;
    PartsObject *self = (PartsObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (buffers_hold(&self->held, tuple, 0, "parts") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    Py_ssize_t n = self->held.n;
    self->rows = PyMem_Calloc(n + 1, sizeof(uint64_t));
    if (self->rows == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = self->held.views[i].len;
        self->rows[i + 1] = self->rows[i] + (len >= 16 ? (uint64_t)(len / 8 - 1) : 0);
    }
    if (part_index(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The row index of a Parts object of many parts (a store built in shards): for each bucket of
 * 2**shift rows, the part of its first row, with ~INDEX_PER_PART buckets a part, so that a
 * row's part is found by two loads and, in the few buckets where a part starts, a step or two
 * (part_of) instead of a search over every part's first row, ~8 dependent steps at 200 parts
 * (a merged store of 200 shards looked up at 0.94-0.96x one build's). None for few parts. */
#define INDEX_FROM_PARTS 8
#define INDEX_PER_PART 16
static int part_index(PartsObject *self) {
    Py_ssize_t n = self->held.n;
    uint64_t total = self->rows[n];
    self->row_index = NULL;
    self->row_shift = 0;
    if (n < INDEX_FROM_PARTS || total == 0) return 0;
    int shift = 0;
    while ((total >> shift) > (uint64_t)n * INDEX_PER_PART) shift++;
    Py_ssize_t buckets = (Py_ssize_t)((total - 1) >> shift) + 2; /* + the bucket past the last */
    int32_t *index = PyMem_Malloc(buckets * sizeof(int32_t));
    if (index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < buckets; k++) {
        uint64_t first = (uint64_t)k << shift;
        index[k] = (int32_t)last_at_most(self->rows, n, first < total ? first : total - 1);
    }
    self->row_index = index;
    self->row_shift = shift;
    return 0;
}

/* Hold ``arg`` (a buffer, or a tuple of 1 to 2**31 - 1 buffers of ``what``, or a Parts object
 * holding them already: borrowed, no buffer taken); ``rows``: count each buffer's rows of
 * offsets, else its bytes. 0, or -1 with an exception set. */
static int buffers_get(Buffers *b, PyObject *arg, int rows, const char *what) {
    if (PyObject_TypeCheck(arg, &PartsType)) {
        PartsObject *parts = (PartsObject *)arg;
        *b = parts->held;
        b->sums = rows ? parts->rows : parts->held.sums;
        b->index = rows ? parts->row_index : NULL;
        b->shift = parts->row_shift;
        b->borrowed = 1;
        return 0;
    }
    return buffers_hold(b, arg, rows, what);
}

static int buffers_hold(Buffers *b, PyObject *arg, int rows, const char *what) {
    int one = !PyTuple_Check(arg);
    b->borrowed = 0;
    b->index = NULL;
    b->shift = 0;
    Py_ssize_t n = one ? 1 : PyTuple_GET_SIZE(arg);
    b->n = 0;
    b->views = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    b->sums = PyMem_Calloc(n + 1, sizeof(uint64_t));
    if (b->views == NULL || b->sums == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (n == 0 || n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "a column has 1 to 2**31 - 1 %s", what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = one ? arg : PyTuple_GET_ITEM(arg, i);
        if (PyObject_GetBuffer(item, &b->views[i], PyBUF_SIMPLE) < 0) return -1;
        b->n = i + 1;
        Py_ssize_t len = b->views[i].len;
        uint64_t count = !rows ? (uint64_t)len : len >= 16 ? (uint64_t)(len / 8 - 1) : 0;
        b->sums[i + 1] = b->sums[i] + count;
    }
    return 0;
}

/* The last i in [0, n) with a[i] <= v (a ascending, a[0] <= v; n >= 1), without a branch a
 * step: the part of a random row is random, and a branchy search over 200 parts mispredicted
 * about half its 8 steps (get_many(64) of a store of 200 shards: 7.4 us of texts against 4.9
 * for one build, ~40 ns a row). */
static Py_ssize_t last_at_most(const uint64_t *a, Py_ssize_t n, uint64_t v) {
    const uint64_t *at = a;
    for (Py_ssize_t len = n; len > 1;) {
        Py_ssize_t half = len / 2;
        at = at[half] <= v ? at + half : at;
        len -= half;
    }
    return at - a;
}

/* The last offsets array of ``o`` whose first row <= row (row < o->sums[o->n]): through the
 * row index where ``o`` has one (its bucket's part and the next bucket's bound the answer:
 * mostly the same part), else a search over every array's first row. */
static inline Py_ssize_t part_of(const Buffers *o, uint64_t row) {
    if (o->index == NULL) return last_at_most(o->sums, o->n, row);
    uint64_t k = row >> o->shift;
    Py_ssize_t lo = o->index[k], hi = o->index[k + 1];
    return lo + last_at_most(o->sums + lo, hi - lo + 1, row);
}

/* Fill ``s`` for the rows ``r[0..n)``: the whole batch is checked before anything is read, in
 * the numpy route's order: every row in the column (else IndexError, the first such row), then
 * every row's offsets within the data of its part (else Damaged, the first such row). ``bases``
 * holds ``nparts + 1`` item counts (bases[0] = 0); ``o`` holds one offsets array, or ``nparts``
 * (counted in rows).
 * 0, or -1 with an exception set. */
static int row_spans(Spans *s, const int64_t *r, Py_ssize_t n, const Buffers *o,
                     const uint64_t *bases, Py_ssize_t nparts) {
    int merged = o->n == 1;
    int64_t count = (int64_t)o->sums[o->n];
    s->n = n;
    s->part = PyMem_Malloc((n ? n : 1) * sizeof(int32_t));
    s->start = PyMem_Malloc((n ? n : 1) * sizeof(uint64_t));
    s->end = PyMem_Malloc((n ? n : 1) * sizeof(uint64_t));
    if (s->part == NULL || s->start == NULL || s->end == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (!merged && o->n != nparts) {
        PyErr_Format(PyExc_ValueError, "%zd offsets arrays for %zd parts", o->n, nparts);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (r[i] < 0 || r[i] >= count) {
            PyErr_Format(PyExc_IndexError, "row %lld out of range for %lld rows", (long long)r[i],
                         (long long)count);
            return -1;
        }
    }
    for (Py_ssize_t lo = 0; lo < n; lo += CHUNK) { /* the offsets: prefetched, then checked */
        Py_ssize_t hi = lo + CHUNK < n ? lo + CHUNK : n;
        const unsigned char *at[CHUNK];
        Py_ssize_t in[CHUNK];
        for (Py_ssize_t i = lo; i < hi; i++) {
            /* the last offsets array whose first row <= r */
            Py_ssize_t q = part_of(o, (uint64_t)r[i]);
            in[i - lo] = q;
            at[i - lo] = (const unsigned char *)o->views[q].buf + (r[i] - (int64_t)o->sums[q]) * 8;
            PREFETCH(at[i - lo]);
            PREFETCH(at[i - lo] + 8);
        }
        for (Py_ssize_t i = lo; i < hi; i++) {
            uint64_t start = load64(at[i - lo]), end = load64(at[i - lo] + 8), base = 0;
            Py_ssize_t p = in[i - lo];
            if (merged) {
                p = last_at_most(bases, nparts, start); /* the last part whose base <= start */
                base = bases[p];
            }
            uint64_t size = bases[p + 1] - bases[p];
            if (start > end || end - base > size) {
                if (nparts == 1)
                    PyErr_Format(Damaged,
                                 "the offsets of row %lld (%llu..%llu) are not within the data "
                                 "(%llu bytes)",
                                 (long long)r[i], (unsigned long long)start,
                                 (unsigned long long)end, (unsigned long long)size);
                else
                    PyErr_Format(Damaged,
                                 "the offsets of row %lld (%llu..%llu) are not within the data "
                                 "of shard %zd (%llu items)",
                                 (long long)r[i], (unsigned long long)start,
                                 (unsigned long long)end, p, (unsigned long long)size);
                return -1;
            }
            s->part[i] = (int32_t)p;
            s->start[i] = start - base;
            s->end[i] = end - base;
        }
    }
    return 0;
}

/* What a row becomes (a new reference, or NULL with an error set): row i of spans s. */
typedef PyObject *(*RowItem)(const void *ctx, const Spans *s, Py_ssize_t i);
/* Work on rows [lo, hi) before their items are made (e.g. prefetch their bytes). */
typedef void (*RowsAhead)(const void *ctx, const Spans *s, Py_ssize_t lo, Py_ssize_t hi);

/* The list of item(ctx, s, i) of every row of rows: the rows checked whole first against
 * offsets_arg (a buffer, or a tuple of one per part) and the parts' bases (row_spans), then
 * made a chunk at a time, ahead(ctx, s, lo, hi) first when given. What texts() and slices()
 * share. */
static PyObject *row_items(Py_buffer *rows, PyObject *offsets_arg, const uint64_t *bases,
                           Py_ssize_t nparts, RowItem item, RowsAhead ahead, const void *ctx) {
    PyObject *list = NULL;
    Buffers offsets = {0, NULL, NULL};
    Spans s = {0, NULL, NULL, NULL};
    if (buffers_get(&offsets, offsets_arg, 1, "offsets arrays") < 0) goto done;
    Py_ssize_t n = rows->len / 8;
    if (row_spans(&s, (const int64_t *)rows->buf, n, &offsets, bases, nparts) < 0) goto done;
    list = PyList_New(n);
    if (list == NULL) goto done;
    for (Py_ssize_t lo = 0; lo < n; lo += CHUNK) {
        Py_ssize_t hi = lo + CHUNK < n ? lo + CHUNK : n;
        if (ahead != NULL) ahead(ctx, &s, lo, hi);
        for (Py_ssize_t i = lo; i < hi; i++) {
            PyObject *x = item(ctx, &s, i);
            if (x == NULL) {
                Py_CLEAR(list);
                goto done;
            }
            PyList_SET_ITEM(list, i, x);
        }
    }
done:
    spans_free(&s);
    buffers_release(&offsets);
    return list;
}

static void text_prefetch(const void *ctx, const Spans *s, Py_ssize_t lo, Py_ssize_t hi) {
    const Buffers *parts = ctx;
    for (Py_ssize_t i = lo; i < hi; i++) {
        const char *bytes = (const char *)parts->views[s->part[i]].buf;
        uint64_t stop =
            s->end[i] < s->start[i] + PREFETCH_BYTES ? s->end[i] : s->start[i] + PREFETCH_BYTES;
        for (uint64_t a = s->start[i] & ~(uint64_t)63; a < stop; a += 64) PREFETCH(bytes + a);
    }
}

static PyObject *text_item(const void *ctx, const Spans *s, Py_ssize_t i) {
    const Buffers *parts = ctx;
    const char *bytes = (const char *)parts->views[s->part[i]].buf;
    return PyUnicode_DecodeUTF8(bytes + s->start[i], (Py_ssize_t)(s->end[i] - s->start[i]),
                                "strict");
}

/* item() of each of a batch's rows of a column's data (a buffer, a tuple of buffers laid end to
 * end, or a Parts object holding them; offsets: one buffer over them all, or one per part, or a
 * Parts object), ahead() a chunk ahead when given: what texts() and bytes_of() share. */
static PyObject *data_rows(PyObject *args, RowItem item, RowsAhead ahead) {
    Py_buffer rows;
    PyObject *offsets_arg, *data, *list = NULL;
    if (!PyArg_ParseTuple(args, "y*OO", &rows, &offsets_arg, &data)) return NULL;
    Buffers parts = {0, NULL, NULL};
    if (buffers_get(&parts, data, 0, "parts") == 0)
        list = row_items(&rows, offsets_arg, parts.sums, parts.n, item, ahead, &parts);
    buffers_release(&parts);
    PyBuffer_Release(&rows);
    return list;
}

/* texts(rows, offsets, data) -> list of str: rows of a UTF-8 column. Checked whole first
 * (row_spans), then each row is decoded (UnicodeDecodeError), its first bytes prefetched a
 * chunk ahead of the decodes. */
static PyObject *texts(PyObject *self, PyObject *args) {
    return data_rows(args, text_item, text_prefetch);
}

static PyObject *bytes_item(const void *ctx, const Spans *s, Py_ssize_t i) {
    const Buffers *parts = ctx;
    const char *bytes = (const char *)parts->views[s->part[i]].buf;
    return PyBytes_FromStringAndSize(bytes + s->start[i], (Py_ssize_t)(s->end[i] - s->start[i]));
}

/* bytes_of(rows, offsets, data) -> list of bytes: rows of a column as new bytes objects (the
 * caller's own, not views of the data), checked whole first as texts(). */
static PyObject *bytes_of(PyObject *self, PyObject *args) {
    return data_rows(args, bytes_item, NULL);
}

static PyObject *slice_item(const void *ctx, const Spans *s, Py_ssize_t i) {
    return PySequence_GetSlice(PyTuple_GET_ITEM((PyObject *)ctx, s->part[i]),
                               (Py_ssize_t)s->start[i], (Py_ssize_t)s->end[i]);
}

/* slices(rows, offsets, parts) -> list of parts[p][a:b]: rows of a column of any item type as
 * slices of its parts (a tuple of sequences, e.g. numpy arrays of the items: views, no copy;
 * each part's len() is its item count; offsets as in texts()). Checked whole first, as texts(). */
static PyObject *slices(PyObject *self, PyObject *args) {
    Py_buffer rows, given = {NULL, NULL};
    PyObject *offsets_arg, *seqs, *list = NULL;
    if (!PyArg_ParseTuple(args, "y*OO!|y*", &rows, &offsets_arg, &PyTuple_Type, &seqs, &given))
        return NULL;
    Py_ssize_t nparts = PyTuple_GET_SIZE(seqs);
    uint64_t *bases = PyMem_Calloc(nparts + 1, sizeof(uint64_t));
    if (bases == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (nparts == 0) {
        PyErr_SetString(PyExc_ValueError, "a column has 1 or more parts");
        goto done;
    }
    if (given.obj != NULL) { /* each part's first item then the count: no len() a part a call */
        if (given.len != (nparts + 1) * 8) {
            PyErr_Format(PyExc_ValueError, "%zd bases for %zd parts", given.len / 8, nparts);
            goto done;
        }
        memcpy(bases, given.buf, (nparts + 1) * 8);
        /* the caller's, not checked against the parts' lengths: a part shorter than its bases
         * say gives short rows (PySequence_GetSlice clamps; nothing is read outside it) */
        for (Py_ssize_t i = 0; i < nparts; i++) {
            if (bases[i] > bases[i + 1] || (i == 0 && bases[0] != 0)) {
                PyErr_SetString(PyExc_ValueError, "bases are not ascending from 0");
                goto done;
            }
        }
    } else {
        for (Py_ssize_t i = 0; i < nparts; i++) {
            Py_ssize_t len = PyObject_Length(PyTuple_GET_ITEM(seqs, i));
            if (len < 0) goto done;
            bases[i + 1] = bases[i] + (uint64_t)len;
        }
    }
    list = row_items(&rows, offsets_arg, bases, nparts, slice_item, NULL, seqs);
done:
    PyMem_Free(bases);
    PyBuffer_Release(&rows);
    if (given.obj != NULL) PyBuffer_Release(&given);
    return list;
}

/* ---- hash-ids: see lading/stores/hashids.py; the hash above, keys read from the shards ---- */

#define FAR 255 /* an away byte of 255 says "at least 255" */

typedef struct {
    const unsigned char *slots; /* slots of a uint8 tag, a uint8 away, a row of row_size */
    Py_ssize_t row_size, record;
    int64_t homes, size, count, max_away;
    Buffers keys;          /* each shard's ids.keys */
    const int64_t *widths; /* each shard's key width */
    const int64_t *firsts; /* each shard's first row, then the row count */
    Py_ssize_t width;         /* the widest key */
    const uint64_t *factors; /* the hash's word multipliers */
} IdsTable;

static int64_t ids_row(const IdsTable *t, int64_t s) {
    const unsigned char *p = t->slots + s * t->record + 2;
    if (t->row_size == 4) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    return (int64_t)load64(p);
}

/* Where row's key is (*width set), or NULL with Damaged set: a slot names a row past the
 * ids. */
static const unsigned char *ids_key(const IdsTable *t, int64_t row, Py_ssize_t *width) {
    if (row >= t->count) {
        PyErr_Format(Damaged, "a slot names row %lld, outside the %lld ids", (long long)row,
                     (long long)t->count);
        return NULL;
    }
    /* the last shard whose first row <= row, without a branch a step (the shard of a random
     * id is random: a branchy search mispredicted ~twice a lookup, ~12 % of its time) */
    const int64_t *at = t->firsts;
    for (Py_ssize_t n = t->keys.n; n > 1;) {
        Py_ssize_t half = n / 2;
        at = at[half] <= row ? at + half : at;
        n -= half;
    }
    Py_ssize_t q = at - t->firsts;
    *width = (Py_ssize_t)t->widths[q];
    return (const unsigned char *)t->keys.views[q].buf + (row - t->firsts[q]) * t->widths[q];
}

/* Whether probe p's key is the key at k (width bytes, zero-padded). */
static int ids_same(const Probe *p, const unsigned char *k, Py_ssize_t width) {
    return p->len <= width && same_key(k, p->key, p->len, width);
}

/* The next slot from `from` (at least the probe's home) holding p's tag, or -1 where the
 * search ends first: an empty slot, one whose id lives nearer its home than `from` is to p's,
 * the end of the slots or max_away. Ids are laid out in the order of their homes. */
static int64_t ids_candidate(const IdsTable *t, const Probe *p, int64_t from) {
    uint8_t tag = (uint8_t)(p->hash >> 56);
    for (int64_t s = from; s < t->size && s - p->bucket <= t->max_away; s++) {
        const unsigned char *slot = t->slots + s * t->record;
        uint8_t away = slot[1];
        if (ids_row(t, s) < 0 || (away < FAR && away < s - p->bucket)) return -1;
        if (slot[0] == tag) return s;
    }
    return -1;
}

/* The row of probe p from slot `from` on (-1: none; -2: damaged, with the exception set). */
static int64_t ids_find(const IdsTable *t, const Probe *p, int64_t from) {
    for (int64_t s = ids_candidate(t, p, from); s >= 0; s = ids_candidate(t, p, s + 1)) {
        int64_t row = ids_row(t, s);
        Py_ssize_t width;
        const unsigned char *k = ids_key(t, row, &width);
        if (k == NULL) return -2;
        if (ids_same(p, k, width)) return row;
    }
    return -1;
}

/* The hash-ids kind (lookup_rows): the home's slots prefetched; then each first candidate's
 * key; then each key confirmed, or the later slots tried (no candidate: absent). */
static int ids_probe(const void *table, PyObject *id, Probe *p, PyObject **hold) {
    const IdsTable *t = table;
    if (hash_key_of(id, p, hold, t->width, t->factors, t->homes) < 0) return -1;
    if (p->key == NULL) return 0;
    const unsigned char *first = t->slots + p->bucket * t->record;
    PREFETCH(first);
    PREFETCH(first + 4 * t->record); /* a present id is ~4 slots on: often this line */
    return 0;
}

static int ids_chunk(const void *table, Probe *probe, int64_t *out, Py_ssize_t m) {
    const IdsTable *t = table;
    for (Py_ssize_t j = 0; j < m; j++) {
        Probe *p = &probe[j];
        p->row = -1;
        if (p->key == NULL) continue;
        p->at = ids_candidate(t, p, p->bucket);
        if (p->at < 0) continue;
        p->row = ids_row(t, p->at);
        if ((p->stored = ids_key(t, p->row, &p->stored_width)) == NULL) return -1;
        PREFETCH(p->stored);
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        Probe *p = &probe[j];
        int64_t row = -1;
        if (p->row >= 0) {
            if (ids_same(p, p->stored, p->stored_width))
                row = p->row;
            else if ((row = ids_find(t, p, p->at + 1)) == -2)
                return -1;
        }
        out[j] = row;
    }
    return 0;
}

static PyObject *hash_ids_rows(PyObject *self, PyObject *args) {
    PyObject *ids, *keys_arg;
    Py_buffer slots, mult, widths, firsts;
    Py_ssize_t row_size, homes, max_away, width;
    if (!PyArg_ParseTuple(args, "Oy*nnnny*Oy*y*", &ids, &slots, &row_size, &homes, &max_away,
                          &width, &mult, &keys_arg, &widths, &firsts))
        return NULL;
    PyObject *result = NULL;
    IdsTable t = {(const unsigned char *)slots.buf, row_size, 2 + row_size, homes, 0, 0,
                  max_away, {0, NULL, NULL}, (const int64_t *)widths.buf,
                  (const int64_t *)firsts.buf, width, (const uint64_t *)mult.buf};
    if ((row_size != 4 && row_size != 8) || width < 8 || width % 8 || homes < 1 ||
        slots.len % t.record || slots.len / t.record < homes || max_away < 0 ||
        max_away >= slots.len / t.record || mult.len / 8 < width / 8) {
        PyErr_SetString(Damaged, "hash-ids index: slots or width do not match its meta");
        goto done;
    }
    t.size = slots.len / t.record;
    if (buffers_get(&t.keys, keys_arg, 0, "key files") < 0) goto done;
    if (widths.len != t.keys.n * 8 || firsts.len != (t.keys.n + 1) * 8) {
        PyErr_Format(PyExc_ValueError, "%zd key files, %zd widths and %zd first rows", t.keys.n,
                     widths.len / 8, firsts.len / 8);
        goto done;
    }
    for (Py_ssize_t q = 0; q < t.keys.n; q++) { /* every shard's keys: rows x width bytes */
        int64_t n_rows = t.firsts[q + 1] - t.firsts[q];
        if (t.widths[q] < 8 || t.widths[q] % 8 || n_rows < 0 || t.firsts[0] != 0 ||
            t.keys.views[q].len != n_rows * t.widths[q]) {
            PyErr_Format(Damaged, "shard %zd's id keys do not hold its rows", q);
            goto done;
        }
    }
    t.count = t.firsts[t.keys.n];
    result = lookup_rows(ids, &t, ids_probe, ids_chunk);
done:
    buffers_release(&t.keys);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&mult);
    PyBuffer_Release(&widths);
    PyBuffer_Release(&firsts);
    return result;
}

/* ``v`` at ``out`` as a little-endian unsigned int of ``itemsize`` (2 or 4) bytes; past it. */
static unsigned char *put_id(unsigned char *out, Py_ssize_t itemsize, unsigned long long v) {
    if (itemsize == 2) {
        uint16_t w = (uint16_t)v;
        memcpy(out, &w, 2);
    } else {
        uint32_t w = (uint32_t)v;
        memcpy(out, &w, 4);
    }
    return out + itemsize;
}

/* flat_ids(lists, itemsize, tail) -> (bytes, bytes): the token ids of each list (of a
 * tokenizer's encodings: lists of ints), then ``tail`` (an end-of-text id; -1: none), back to
 * back as little-endian unsigned ints of ``itemsize`` (2 or 4) bytes; and each list's length
 * (tail included) as int64. Checked whole: a list that is not a list, or an id that is not an
 * int in [0, 256 ** itemsize), raises before anything is returned. */
static PyObject *flat_ids(PyObject *self, PyObject *args) {
    PyObject *lists;
    Py_ssize_t itemsize;
    long long tail;
    if (!PyArg_ParseTuple(args, "O!nL", &PyList_Type, &lists, &itemsize, &tail)) return NULL;
    if (itemsize != 2 && itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "flat_ids: itemsize must be 2 or 4");
        return NULL;
    }
    unsigned long long limit = itemsize == 2 ? 0xFFFFull : 0xFFFFFFFFull;
    if (tail > (long long)limit) {
        PyErr_SetString(PyExc_ValueError, "flat_ids: tail does not fit itemsize");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(lists), total = 0, extra = tail >= 0 ? 1 : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = PyList_GET_ITEM(lists, i);
        if (!PyList_Check(one)) {
            PyErr_Format(PyExc_TypeError, "flat_ids: item %zd is not a list", i);
            return NULL;
        }
        total += PyList_GET_SIZE(one) + extra;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, total * itemsize);
    PyObject *lengths = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (data == NULL || lengths == NULL) goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    unsigned char *lens = (unsigned char *)PyBytes_AS_STRING(lengths);
    const unsigned char *end = out + total * itemsize;
    for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(lists); i++) {
        PyObject *one = PyList_GET_ITEM(lists, i);
        Py_ssize_t m = PyList_GET_SIZE(one);
        if (out + (m + extra) * itemsize > end) { /* a list grew since it was counted */
            PyErr_SetString(PyExc_RuntimeError, "flat_ids: a list changed while read");
            goto fail;
        }
        for (Py_ssize_t j = 0; j < m; j++) {
            unsigned long long v = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(one, j));
            if (v == (unsigned long long)-1 && PyErr_Occurred()) goto fail;
            if (v > limit) {
                PyErr_Format(PyExc_ValueError, "flat_ids: id %llu of list %zd does not fit %zd "
                             "bytes", v, i, itemsize);
                goto fail;
            }
            out = put_id(out, itemsize, v);
        }
        if (extra) out = put_id(out, itemsize, (unsigned long long)tail);
        int64_t len = (int64_t)(m + extra);
        memcpy(lens + i * sizeof(int64_t), &len, sizeof(int64_t));
    }
    if (out != end) { /* a list shrank since it was counted: nothing half-written goes out */
        PyErr_SetString(PyExc_RuntimeError, "flat_ids: a list changed while read");
        goto fail;
    }
    return Py_BuildValue("(NN)", data, lengths);
fail:
    Py_XDECREF(data);
    Py_XDECREF(lengths);
    return NULL;
}

static PyObject *configure(PyObject *self, PyObject *arg) {
    Py_XINCREF(arg);
    Py_XSETREF(numpy_integer, arg);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"dense_rows", dense_rows, METH_VARARGS,
     "dense_rows(ids, table, itemsize) -> (bytearray of int64 rows, first absent or -1)"},
    {"sorted_rows", sorted_rows, METH_VARARGS,
     "sorted_rows(ids, keys, rows, itemsize) -> (bytearray of int64 rows, first absent or -1)"},
    {"runs_rows", runs_rows, METH_VARARGS,
     "runs_rows(ids, runs) -> (bytearray of int64 rows, first absent or -1); runs: the runs' "
     "firsts, then their rows, then their lengths, int64"},
    {"hash_rows", hash_rows, METH_VARARGS,
     "hash_rows(ids, table, keys, width, buckets, max_spill, multipliers) -> (bytearray of int64 "
     "rows, first absent or -1)"},
    {"hash_ids_rows", hash_ids_rows, METH_VARARGS,
     "hash_ids_rows(ids, slots, row_size, homes, max_away, width, multipliers, keys, widths, "
     "firsts) -> (bytearray of int64 rows, first absent or -1)"},
    {"texts", texts, METH_VARARGS,
     "texts(rows, offsets, data) -> list of str (data: a buffer or a tuple of buffers; offsets: "
     "one buffer or one per part)"},
    {"bytes_of", bytes_of, METH_VARARGS,
     "bytes_of(rows, offsets, data) -> list of bytes (data and offsets as in texts())"},
    {"slices", slices, METH_VARARGS,
     "slices(rows, offsets, parts[, bases]) -> list of parts[p][a:b] (parts: a tuple of "
     "sequences; bases: their first items then the count, uint64, else len() of each)"},
    {"flat_ids", flat_ids, METH_VARARGS,
     "flat_ids(lists, itemsize, tail) -> (ids as little-endian uint of itemsize bytes, int64 "
     "lengths): a tokenizer's id lists back to back, each followed by tail (-1: none)"},
    {"configure", configure, METH_O, "configure(numpy.integer): ids of that type are integers"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Damaged = PyErr_NewException("lading.disk._native.Damaged", PyExc_ValueError, NULL);
    if (Damaged == NULL || PyModule_AddObjectRef(m, "Damaged", Damaged) < 0 ||
        PyType_Ready(&PartsType) < 0 ||
        PyModule_AddObjectRef(m, "Parts", (PyObject *)&PartsType) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_SHA256", LADING_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
