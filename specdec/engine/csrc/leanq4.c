/* The lean Llama forward of specdec's "q4_1" mode, in C (see specdec/native.py).
 *
 * Weights: every decoder linear layer in the GGUF's Q4_1 code (groups of 32 along the input:
 * w = d q + m, q in 0..15; 16 bytes a group, the low nibbles holding elements 0..15 and the
 * high nibbles 16..31), the LM head in Q8_0 (w = d q, q in -127..127), scales as float32.
 * Activations, the KV cache and every sum are float32.
 *
 * Exactness by construction: every row of a call (one token) runs the same instructions in the
 * same order whatever the number of rows, and attends over its own prefix exactly as a
 * one-token step at that position does; so a verify call's rows equal single steps bit for bit.
 * A tree call (specdec_q4_forward_tree) gives node r slot start + r and position start + depth(r),
 * and has it attend to slots 0 .. start-1 and then its ancestors' and its own, root-down: the keys,
 * in the order, of the chain forward over its path, whose logits it therefore gets bit for bit.
 * The code uses GCC/Clang vector extensions (16 floats), which the compiler maps onto the
 * machine's vector unit (AVX-512, AVX2 or SSE) at -march=native.
 */
#include "lean_common.h" /* the model's structures and the float helpers leanq8.c shares */

typedef uint8_t v16u8 __attribute__((vector_size(16)));


/* The version of the structures (lean_common.h); specdec_q4_abi reports it with their sizes, and Python
 * refuses a library whose structures differ from its ctypes ones (a stale or foreign build). ABI 2: the
 * one model_t of both forwards (layer_codes, which must be 0 here: Q4_1 layers); 3: the model's own
 * phase clocks (phase_s) replace the library-global ones. */
#define SPECDEC_Q4_ABI 3
int32_t specdec_q4_abi(int64_t *sizes, int32_t n) {
    const int64_t s[4] = {sizeof(q41_t), sizeof(q80_t), sizeof(layer_t), sizeof(model_t)};
    if (!sizes || n < 0) return -2;
    for (int i = 0; i < n && i < 4; i++) sizes[i] = s[i];
    return SPECDEC_Q4_ABI;
}

/* Optional wall-clock time per phase of the forward, added to the model's own clocks (m->phase_s, set
 * by Python while profiling; NULL: off): linear layers, LM head, attention (rotary, cache writes,
 * attention), other (embedding, norms, SiLU). Per model, so two models profile independently. */
enum { PH_LINEAR, PH_HEAD, PH_ATTENTION, PH_OTHER, PHASES };

#define PHASE(which, ...)                                                                             \
    do {                                                                                              \
        double *const clocks_ = m->phase_s;                                                           \
        const double t0_ = clocks_ ? now() : 0.0;                                                     \
        __VA_ARGS__;                                                                                  \
        if (clocks_) clocks_[which] += now() - t0_;                                                   \
    } while (0)

/* y[r][n] (+)= sum_k W[n][k] x[r][k] for R rows (R a compile-time constant after inlining). */
static inline __attribute__((always_inline)) void q41_rows(const q41_t *w, const float *restrict x, int R,
                                                          float *restrict y, int ldy, int add) {
    const int K = w->k, G = K / 32;
    for (int n = 0; n < w->n; n++) {
        v16f acc[8];
        for (int r = 0; r < R; r++) acc[r] = (v16f){0};
        const uint8_t *q = w->qs + (size_t)n * (K / 2);
        const float *dn = w->d + (size_t)n * G, *mn = w->m + (size_t)n * G;
        for (int g = 0; g < G; g++) {
            v16u8 b;
            memcpy(&b, q + 16 * g, 16);
            const float dg = dn[g], mg = mn[g];
            const v16f lo = __builtin_convertvector(__builtin_convertvector(b & 15, v16i), v16f) * dg + mg;
            const v16f hi = __builtin_convertvector(__builtin_convertvector(b >> 4, v16i), v16f) * dg + mg;
            for (int r = 0; r < R; r++) {
                const float *xr = x + (size_t)r * K + 32 * g;
                acc[r] += lo * loadf(xr);
                acc[r] += hi * loadf(xr + 16);
            }
        }
        for (int r = 0; r < R; r++) {
            const float s = hsum(acc[r]);
            if (add) y[(size_t)r * ldy + n] += s;
            else y[(size_t)r * ldy + n] = s;
        }
    }
}

static void q41_mm(const q41_t *w, const float *x, int rows, float *y, int ldy, int add) {
    for (int r0 = 0; r0 < rows; r0 += 8) {
        const float *xr = x + (size_t)r0 * w->k;
        float *yr = y + (size_t)r0 * ldy;
        switch (rows - r0 < 8 ? rows - r0 : 8) {
        case 1: q41_rows(w, xr, 1, yr, ldy, add); break;
        case 2: q41_rows(w, xr, 2, yr, ldy, add); break;
        case 3: q41_rows(w, xr, 3, yr, ldy, add); break;
        case 4: q41_rows(w, xr, 4, yr, ldy, add); break;
        case 5: q41_rows(w, xr, 5, yr, ldy, add); break;
        case 6: q41_rows(w, xr, 6, yr, ldy, add); break;
        case 7: q41_rows(w, xr, 7, yr, ldy, add); break;
        default: q41_rows(w, xr, 8, yr, ldy, add); break;
        }
    }
}

static inline __attribute__((always_inline)) void q80_rows(const q80_t *w, const float *restrict x, int R,
                                                          float *restrict y, int ldy) {
    const int K = w->k, G = K / 32;
    for (int n = 0; n < w->n; n++) {
        v16f acc[8];
        for (int r = 0; r < R; r++) acc[r] = (v16f){0};
        const uint8_t *q = w->qs + (size_t)n * K;
        const float *dn = w->d + (size_t)n * G;
        for (int g = 0; g < G; g++) {
            v16u8 b0, b1;
            memcpy(&b0, q + 32 * g, 16);
            memcpy(&b1, q + 32 * g + 16, 16);
            const float dg = dn[g];
            /* int8 -> float through q + 128 (GCC widens unsigned bytes in vector registers; a
             * direct signed conversion compiles to scalar code) */
            const v16f lo = __builtin_convertvector(__builtin_convertvector(b0 ^ 128, v16i) - 128, v16f) * dg;
            const v16f hi = __builtin_convertvector(__builtin_convertvector(b1 ^ 128, v16i) - 128, v16f) * dg;
            for (int r = 0; r < R; r++) {
                const float *xr = x + (size_t)r * K + 32 * g;
                acc[r] += lo * loadf(xr);
                acc[r] += hi * loadf(xr + 16);
            }
        }
        for (int r = 0; r < R; r++) y[(size_t)r * ldy + n] = hsum(acc[r]);
    }
}

static void q80_mm(const q80_t *w, const float *x, int rows, float *y, int ldy) {
    for (int r0 = 0; r0 < rows; r0 += 8) {
        const float *xr = x + (size_t)r0 * w->k;
        float *yr = y + (size_t)r0 * ldy;
        switch (rows - r0 < 8 ? rows - r0 : 8) {
        case 1: q80_rows(w, xr, 1, yr, ldy); break;
        case 2: q80_rows(w, xr, 2, yr, ldy); break;
        case 3: q80_rows(w, xr, 3, yr, ldy); break;
        case 4: q80_rows(w, xr, 4, yr, ldy); break;
        case 5: q80_rows(w, xr, 5, yr, ldy); break;
        case 6: q80_rows(w, xr, 6, yr, ldy); break;
        case 7: q80_rows(w, xr, 7, yr, ldy); break;
        default: q80_rows(w, xr, 8, yr, ldy); break;
        }
    }
}

/* RMSNorm as transformers computes it: x / sqrt(mean(x^2) + eps), then times the weight.
 * Vector loops run over whole blocks of 16 and a scalar loop over the rest (here and below). */



/* The cache slot of key t: t itself for a chain (path NULL) and for the cached prefix (t < start);
 * for a tree node, path[t - start] (its ancestors' slots root-down, then its own). */
#define SLOT(t) ((size_t)(path && (t) >= start ? path[(t) - start] : (t)))

/* One query row of one head over cached positions 0 .. end-1: softmax(q K^T / sqrt(hd)) V. */
static void attend(const float *q, const float *keys, const float *values, int end, int hd, float *scores,
                   float *out, const int32_t *path, int start) {
    const float scale = 1.0f / sqrtf((float)hd);
    float top = -INFINITY;
    for (int t = 0; t < end; t++) {
        const float s = dot(q, keys + SLOT(t) * hd, hd) * scale;
        scores[t] = s;
        if (s > top) top = s;
    }
    float total = 0.0f;
    for (int t = 0; t < end; t++) {
        scores[t] = expf(scores[t] - top);
        total += scores[t];
    }
    const float inv = 1.0f / total;
    const int nv = hd - hd % 16;
    for (int i = 0; i < nv; i += 16) {
        v16f acc = {0};
        for (int t = 0; t < end; t++) acc += scores[t] * loadf(values + SLOT(t) * hd + i);
        storef(out + i, acc * inv);
    }
    for (int i = nv; i < hd; i++) {
        float acc = 0.0f;
        for (int t = 0; t < end; t++) acc += scores[t] * values[SLOT(t) * hd + i];
        out[i] = acc * inv;
    }
}

static int forward(const model_t *m, const int64_t *ids, const int32_t *parents, int32_t k, int32_t start,
                   float *cache, int32_t capacity, float *logits, int32_t keep);

/* Logits of the k tokens ids placed at positions start .. start+k-1, for the last `keep` rows
 * (logits: keep x head.n). cache: (layers, 2, kv_heads, capacity, head_dim), holding positions
 * 0 .. start-1; the new tokens' keys and values are written. Returns 0, -1 when out of memory,
 * -2 for arguments out of range (checked here too, not only in Python; nothing is written). */
int specdec_q4_forward(const model_t *m, const int64_t *ids, int32_t k, int32_t start, float *cache,
                       int32_t capacity, float *logits, int32_t keep) {
    return forward(m, ids, NULL, k, start, cache, capacity, logits, keep);
}

/* specdec_q4_forward over a tree of k nodes: parents[r] in [-1, r - 1] (-1: a child of the cached
 * prefix; -2 otherwise, nothing written). Node r's key and value go to slot start + r, its position
 * is start + its depth, and it attends to the prefix and its path: the chain's logits, bit for bit. */
int specdec_q4_forward_tree(const model_t *m, const int64_t *ids, const int32_t *parents, int32_t k,
                            int32_t start, float *cache, int32_t capacity, float *logits, int32_t keep) {
    if (!parents) return -2;
    return forward(m, ids, parents, k, start, cache, capacity, logits, keep);
}

static int forward(const model_t *m, const int64_t *ids, const int32_t *parents, int32_t k, int32_t start,
                   float *cache, int32_t capacity, float *logits, int32_t keep) {
    if (!m || !ids || !cache || !logits || k < 1 || keep < 1 || keep > k || start < 0 || capacity < 1 ||
        capacity > m->positions || start > capacity - k)
        return -2;
    if (m->vocab < 1 || m->layer_codes != 0) return -2; /* this forward runs Q4_1 layers only */
    for (int r = 0; r < k; r++)
        if (ids[r] < 0 || ids[r] >= m->vocab) return -2;
    if (parents)
        for (int r = 0; r < k; r++)
            if (parents[r] < -1 || parents[r] >= r) return -2;
    /* a tree's rows: depth[r] and the slots of r's path, root-down, at path + off[r] */
    int32_t *depth = NULL, *off = NULL, *path = NULL;
    if (parents && tree_paths(parents, k, k, start, &depth, &off, &path) != 0) return -1;
    const int H = m->hidden, hd = m->head_dim, nh = m->heads, kv = m->kv_heads, I = m->inter;
    const int qkv_n = (nh + 2 * kv) * hd, group = nh / kv, AD = nh * hd; /* AD may differ from H */
    const size_t need = (size_t)k * (2 * H + qkv_n + AD + 3 * I) + (size_t)(start + k) + 16;
    float *buf = (float *)malloc(sizeof(float) * need);
    if (!buf) {
        free(depth), free(off), free(path);
        return -1;
    }
    float *x = buf, *h = x + (size_t)k * H, *qkv = h + (size_t)k * H, *att = qkv + (size_t)k * qkv_n;
    float *gu = att + (size_t)k * AD, *act = gu + (size_t)k * 2 * I, *scores = act + (size_t)k * I;
    PHASE(PH_OTHER, for (int r = 0; r < k; r++) memcpy(x + (size_t)r * H, m->embed + (size_t)ids[r] * H,
                                                      sizeof(float) * H));
    const size_t plane = (size_t)kv * capacity * hd;
    for (int l = 0; l < m->n_layers; l++) {
        const layer_t *L = m->layers + l;
        float *kc = cache + (size_t)l * 2 * plane, *vc = kc + plane;
        PHASE(PH_OTHER, for (int r = 0; r < k; r++) rms(x + (size_t)r * H, L->norm_attn, H, m->eps, h + (size_t)r * H));
        PHASE(PH_LINEAR, q41_mm(&L->qkv, h, k, qkv, qkv_n, 0));
        PHASE(PH_ATTENTION, {
            for (int r = 0; r < k; r++) {
                const int pos = start + (parents ? depth[r] : r), slot = start + r;
                float *row = qkv + (size_t)r * qkv_n;
                for (int j = 0; j < nh + kv; j++)
                    rotate(row + (size_t)j * hd, m->cos + (size_t)pos * hd, m->sin + (size_t)pos * hd, hd);
                for (int j = 0; j < kv; j++) {
                    memcpy(kc + ((size_t)j * capacity + slot) * hd, row + (size_t)(nh + j) * hd, sizeof(float) * hd);
                    memcpy(vc + ((size_t)j * capacity + slot) * hd, row + (size_t)(nh + kv + j) * hd,
                           sizeof(float) * hd);
                }
            }
            /* row r attends to positions 0 .. start + r, exactly as a one-token step there (a tree
             * node: to the prefix and its path, exactly as the chain over its path) */
            for (int r = 0; r < k; r++) {
                const int end = start + (parents ? depth[r] : r) + 1;
                const float *row = qkv + (size_t)r * qkv_n;
                for (int j = 0; j < nh; j++) {
                    const int kvh = j / group;
                    attend(row + (size_t)j * hd, kc + (size_t)kvh * capacity * hd, vc + (size_t)kvh * capacity * hd,
                           end, hd, scores, att + (size_t)r * AD + (size_t)j * hd,
                           parents ? path + off[r] : NULL, start);
                }
            }
        });
        PHASE(PH_LINEAR, q41_mm(&L->o, att, k, x, H, 1));
        PHASE(PH_OTHER, for (int r = 0; r < k; r++) rms(x + (size_t)r * H, L->norm_mlp, H, m->eps, h + (size_t)r * H));
        PHASE(PH_LINEAR, q41_mm(&L->gate_up, h, k, gu, 2 * I, 0));
        PHASE(PH_OTHER, {
            for (int r = 0; r < k; r++) {
                const float *g = gu + (size_t)r * 2 * I, *u = g + I;
                float *a = act + (size_t)r * I;
                for (int i = 0; i < I; i++) a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
            }
        });
        PHASE(PH_LINEAR, q41_mm(&L->down, act, k, x, H, 1));
    }
    const int first = k - keep;
    PHASE(PH_OTHER, for (int r = first; r < k; r++) rms(x + (size_t)r * H, m->norm, H, m->eps, h + (size_t)(r - first) * H));
    PHASE(PH_HEAD, q80_mm(&m->head, h, keep, logits, m->head.n));
    free(buf), free(depth), free(off), free(path);
    return 0;
}

/* One linear layer, for tests and benchmarks: y (rows x n) = x (rows x k) W^T. Returns 0, or -2 for a
 * null pointer, rows < 1 or a shape the kernels do not take (n < 1, k not a positive multiple of 32). */
int32_t specdec_q41_mm(const q41_t *w, const float *x, int32_t rows, float *y) {
    if (!w || !x || !y || rows < 1 || !w->qs || !w->d || !w->m || w->n < 1 || w->k < 32 || w->k % 32) return -2;
    q41_mm(w, x, rows, y, w->n, 0);
    return 0;
}
int32_t specdec_q80_mm(const q80_t *w, const float *x, int32_t rows, float *y) {
    if (!w || !x || !y || rows < 1 || !w->qs || !w->d || w->n < 1 || w->k < 32 || w->k % 32) return -2;
    q80_mm(w, x, rows, y, w->n);
    return 0;
}
