/* What the two C forwards share (leanq4.c, the "q4_1" mode; leanq8.c, "q4q8"): the model's structures as
 * Python describes them (specdec/engine/native.py's ctypes structures, checked at load by each library's
 * ABI function: sizes and version), the error codes, and the float helpers whose arithmetic both forwards
 * must do alike (loads, the fixed-order lane sum, RMS norm, rotary embedding, dot products, the clock).
 * Every build compiles with -ffp-contract=off: no FMA contraction, the same float arithmetic on every CPU.
 */
#ifndef SPECDEC_LEAN_COMMON_H
#define SPECDEC_LEAN_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Error codes of the exported functions (specdec/engine/native.py turns them into exceptions). */
enum { OK = 0, ERR_MEMORY = -1, ERR_ARGUMENT = -2 };

typedef struct {
    const uint8_t *qs; /* (n, k / 2): per group of 32, low nibbles elements 0..15, high 16..31 */
    const float *d;    /* (n, k / 32) */
    const float *m;    /* (n, k / 32) */
    int32_t n, k;
} q41_t;

typedef struct {
    const uint8_t *qs; /* (n, k): the int8 codes' bytes */
    const float *d;    /* (n, k / 32) */
    int32_t n, k;
} q80_t;

typedef struct {
    const float *norm_attn, *norm_mlp;
    q41_t qkv, o, gate_up, down;
} layer_t;

typedef struct {
    int32_t n_layers, hidden, heads, kv_heads, head_dim, inter, positions;
    float eps;
    const float *embed; /* (vocab, hidden) */
    const layer_t *layers;
    const float *norm;
    q80_t head;
    const float *cos, *sin; /* (positions, head_dim); sin with rotate_half's sign folded in */
    int32_t vocab;          /* rows of embed: every id must lie in 0 .. vocab - 1 */
    /* the decoder layers' code: 0 = Q4_1 (the GGUF's), 1 = Q8_0 (qs: (n, k) int8 bytes, d its
     * scales, m unused; the distilled drafts' own int8 weights) */
    int32_t layer_codes;
    /* the model's own phase clocks (PHASES seconds: linear, head, attention, other) that the q4_1
     * forward adds to while not NULL (profiling on); leanq8 keeps its clocks per handle instead */
    double *phase_s;
} model_t;

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

static inline v16f loadf(const float *p) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void storef(float *p, v16f v) { memcpy(p, &v, sizeof v); }

static inline float hsum(v16f v) {
    float t[16];
    storef(t, v);
    float a = (t[0] + t[8]) + (t[4] + t[12]);
    float b = (t[2] + t[10]) + (t[6] + t[14]);
    float c = (t[1] + t[9]) + (t[5] + t[13]);
    float e = (t[3] + t[11]) + (t[7] + t[15]);
    return (a + b) + (c + e);
}

static void rms(const float *x, const float *w, int n, float eps, float *out) {
    const int nv = n - n % 16;
    v16f acc = {0};
    for (int i = 0; i < nv; i += 16) {
        const v16f v = loadf(x + i);
        acc = acc + v * v;
    }
    float s = hsum(acc);
    for (int i = nv; i < n; i++) s = s + x[i] * x[i];
    const float inv = 1.0f / sqrtf(s / (float)n + eps);
    for (int i = 0; i < nv; i += 16) storef(out + i, loadf(w + i) * (loadf(x + i) * inv));
    for (int i = nv; i < n; i++) out[i] = w[i] * (x[i] * inv);
}

static void rotate(float *x, const float *cos, const float *sin, int hd) {
    float t[hd];
    const int half = hd / 2; /* element i pairs with i + half (mod hd): two loops, no division */
    for (int i = 0; i < half; i++) t[i] = x[i] * cos[i] + x[i + half] * sin[i];
    for (int i = half; i < hd; i++) t[i] = x[i] * cos[i] + x[i - half] * sin[i];
    memcpy(x, t, sizeof(float) * hd);
}

static inline float dot(const float *a, const float *b, int n) {
    const int nv = n - n % 16;
    v16f acc = {0};
    for (int i = 0; i < nv; i += 16) acc = acc + loadf(a + i) * loadf(b + i);
    float s = hsum(acc);
    for (int i = nv; i < n; i++) s = s + a[i] * b[i];
    return s;
}

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The one layout of a tree call in C (Python's is specdec.theory.trees.tree_layout, over the same
 * parents): n nodes with parents[i] in [-1, i - 1] (checked by the caller), the call's rows being
 * the last k of them (the first n - k written by earlier calls). *depth: every node's depth (0 for a
 * child of the cached prefix, n entries); *off and *path: row r attends to the depth[n - k + r] + 1
 * slots path[off[r]] ..., prefix + each node of its path, root-down, itself last. Returns 0, or -1
 * when memory runs out (nothing allocated then); the caller frees the three arrays. */
static int tree_paths(const int32_t *parents, int n, int k, int prefix, int32_t **depth_out, int32_t **off_out,
                      int32_t **path_out) {
    const int before = n - k;
    int32_t *depth = malloc(sizeof(int32_t) * (size_t)n), *off = malloc(sizeof(int32_t) * (size_t)k);
    size_t total = 0;
    for (int i = 0; depth && i < n; i++) depth[i] = parents[i] < 0 ? 0 : depth[parents[i]] + 1;
    for (int r = 0; depth && off && r < k; r++) off[r] = (int32_t)total, total += (size_t)depth[before + r] + 1;
    int32_t *path = depth && off ? malloc(sizeof(int32_t) * total) : NULL;
    if (!path) {
        free(depth), free(off);
        return -1;
    }
    for (int r = 0; r < k; r++)
        for (int node = before + r, i = depth[before + r]; node >= 0; node = parents[node], i--)
            path[off[r] + i] = prefix + node;
    *depth_out = depth, *off_out = off, *path_out = path;
    return 0;
}

#endif /* SPECDEC_LEAN_COMMON_H */
