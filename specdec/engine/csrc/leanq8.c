/* The lean Llama forward of specdec's "q4q8" mode, in C (see specdec/native.py).
 *
 * Weights: the GGUF's Q4_1 decoder layers (w = d q + m, q in 0..15, groups of 32 along the
 * input; or, for the distilled drafts, Q8_0 layers holding their own int8 codes) and its Q8_0 LM
 * head (w = d q, q in -127..127), repacked at load (specdec_q8_new) into
 * tiles of 16 output columns: for each tile and block of 32 inputs, the codes of the 16 columns
 * laid out one column per 32-bit lane, 4 consecutive inputs per lane, so that one load (and, for
 * 4-bit codes, one and/shift) gives the unsigned-byte operand of an integer dot product for all 16
 * columns at once, and the block is decoded once for up to 8 rows of a call (leanq8_matmul.h's
 * register tiles; wider calls in even passes), or, where the CPU has AMX-INT8, its codes are the B
 * operand of one TDPBSSD for up to 16 rows (specdec_q8_amx, ABI 7).
 *
 * Activations: each row quantized per block of 32 to int8 with a float scale (llama.cpp's Q8_1:
 * dx = amax / 127, q = round(x / dx), and s = dx * sum(q)). A Q4_1 block then contributes
 * (d dx) isum + m s, a Q8_0 block (d dx) isum, with isum the block's exact int32 dot product.
 *
 * Integer dot products by the instruction set the compiler targets (chosen at compile time from
 * its macros): AVX512-VNNI (vpdpbusd, 16 lanes), AVX-VNNI (vpdpbusd on 8 lanes, twice), AVX2
 * (vpmaddubsw + vpmaddwd; the Q8_0 head by the sign trick, since vpmaddubsw saturates), else
 * portable C loops over int32; AMX (TDPBSSD) for calls of many rows where CPUID and Linux allow it
 * (checked at run time). Integer sums are exact, so every path gives the same isum; the
 * float epilogue is one piece of code for all paths, compiled with -ffp-contract=off (no fused
 * multiply-adds), its operations in a fixed order. Hence:
 *
 * Exactness by construction: each row's arithmetic is the same whatever the number of rows in
 * the call, the number of threads (threads split whole tiles of output columns; each tile is
 * computed by one thread in the same block order; a small pthread pool per model) and the instruction set, so verify rows equal
 * single steps bit for bit, and builds for other CPU levels give the same logits (on a given
 * libm). Activations between layers, the KV cache and attention are float32.
 *
 * Trees (specdec_q8_forward_tree, ABI 4): a call over draft-tree nodes given by their parents within
 * the call. Node r is written at slot start + r, rotated at position start + depth(r), and attends to
 * slots 0 .. start-1 and then its ancestors' slots and its own (a slot map in attend_g): the keys, in
 * the order, of the chain forward over its path, so its logits equal that chain's bit for bit.
 *
 * ABI 5: specdec_q8_forward_ex (embedding rows in place of ids; every row's pre-norm features out)
 * and a standalone Q8_0 linear (specdec_q8_linear*). The thread pool lives in lean_pool.h.
 */
#include "lean_common.h" /* the model's structures and the float helpers leanq4.c shares */
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define SPECDEC_Q8_ABI 13 /* 13: specdec_sample_cdf decides by a blocked sum where rounding cannot change the index, and reports its path; 12: specdec_sample_cdf (one draw from a row, the plain step's); 11: specdec_sfx_* (suffix decoding's trie and speculation); 10: specdec_q8_medusa, specdec_q8_mlp_stage (a Medusa draft, an MLP stage in one call); 9: specdec_q8_eagle_inputs, specdec_q8_eagle_level (one EAGLE level in one call); 8: specdec_q8_forward_spec (a tree hung below earlier calls' nodes), specdec_q8_linear_topk, specdec_topk; 7: specdec_q8_amx, specdec_q8_peak; 6: model_t gained phase_s (the q4_1 forward's per-model clocks) */

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define ISA "avx512vnni"
#define ISA_AVX512VNNI 1
#elif defined(__AVXVNNI__)
#define ISA "avxvnni"
#define ISA_AVXVNNI 1
#elif defined(__AVX2__)
#define ISA "avx2"
#define ISA_AVX2 1
#else
#define ISA "portable"
#endif



/* Sizes of the structures, for the ctypes check at load; returns the ABI version, or ERR_ARGUMENT (-2,
 * nothing written) for a NULL sizes or a negative n (as leanq4.c's specdec_q4_abi). */
int32_t specdec_q8_abi(int64_t *sizes, int32_t n) {
    const int64_t s[4] = {sizeof(q41_t), sizeof(q80_t), sizeof(layer_t), sizeof(model_t)};
    if (!sizes || n < 0) return -2;
    for (int i = 0; i < n && i < 4; i++) sizes[i] = s[i];
    return SPECDEC_Q8_ABI;
}

/* The integer path this library was compiled with. */
const char *specdec_q8_isa(void) { return ISA; }

#include "lean_pool.h" /* the thread pool: part_fn, pool_t, pool_new, pool_free, pool_run */

/* --- repacked weights ----------------------------------------------------------------------- */

#define TILE 16
/* A Q4_1 (tile, block): 256 bytes of nibbles, then d[16] and m[16] as IEEE half floats (the
 * GGUF's own precision; Python rounds them so and reports any error, and half -> float is exact
 * on every path). Byte 64 g + 4 j + e (g in 0..3, lane j, e in 0..3) holds element 4 g + e of
 * column j in its low nibble and element 16 + 4 g + e in its high nibble. */
#define Q4_CHUNK (256 + 2 * 32)
/* A Q8_0 (tile, block): 512 bytes of int8 (byte 64 g + 4 j + e: element 4 g + e of column j,
 * g in 0..7), then d[16] as half floats. */
#define Q8_CHUNK (512 + 32)

/* float -> half, round to nearest even (packing only; the values given are halves already). */
static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const float a = fabsf(f);
    if (!(a <= 65504.0f)) return sign | (a != a ? 0x7e00 : 0x7c00);
    if (a < 0x1p-14f) return sign | (uint16_t)nearbyintf(a * 0x1p24f); /* subnormal (exact scaling) */
    uint32_t h = ((((x >> 23) & 255) - 112) << 10) | ((x & 0x7fffff) >> 13);
    const uint32_t rest = x & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

/* half -> float, exact. */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, man = h & 1023;
    uint32_t bits;
    if (exp == 0) {
        const float f = (float)man * 0x1p-24f; /* zero or subnormal: exact */
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

typedef struct {
    uint8_t *data;
    int32_t n, k, tiles, blocks;
} pq_t;

typedef struct {
    const float *norm_attn, *norm_mlp;
    pq_t qkv, o, gate_up, down;
    int q4; /* 1: the matrices hold Q4_1 tiles, 0: Q8_0 tiles */
} player_t;

enum { PH_LINEAR, PH_HEAD, PH_ATTENTION, PH_OTHER, PHASES };

typedef struct {
    int32_t n_layers, hidden, heads, kv_heads, head_dim, inter, positions, vocab;
    float eps;
    const float *embed, *norm, *cos, *sin;
    player_t *layers;
    pq_t head;
    /* per-model phase clocks (specdec_q8_profile): not shared with any other model */
    int profiling;
    double phase_s[PHASES];
    pthread_mutex_t call_mu; /* one forward at a time per model (ctypes releases the GIL) */
} handle_t;

/* The process's pool (see above) and the lock that gives it to one forward at a time. */
static pool_t *process_pool = NULL;
static pthread_mutex_t process_pool_mu = PTHREAD_MUTEX_INITIALIZER;

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

static int pack_q41(const q41_t *w, pq_t *out) {
    if (!w->qs || !w->d || !w->m || w->n < 1 || w->k < 32 || w->k % 32) return ERR_ARGUMENT;
    out->n = w->n, out->k = w->k, out->blocks = w->k / 32, out->tiles = (w->n + TILE - 1) / TILE;
    out->data = alloc64((size_t)out->tiles * out->blocks * Q4_CHUNK);
    if (!out->data) return ERR_MEMORY;
    for (int t = 0; t < out->tiles; t++)
        for (int b = 0; b < out->blocks; b++) {
            uint8_t *c = out->data + ((size_t)t * out->blocks + b) * Q4_CHUNK;
            uint16_t *d = (uint16_t *)(c + 256), *m = d + TILE;
            for (int j = 0; j < TILE; j++) {
                const int n = t * TILE + j;
                if (n >= w->n) continue; /* padding columns: zero codes, scales and minimums */
                const uint8_t *src = w->qs + (size_t)n * (w->k / 2) + 16 * b;
                uint8_t q[32];
                for (int i = 0; i < 16; i++) q[i] = src[i] & 15, q[16 + i] = src[i] >> 4;
                for (int g = 0; g < 4; g++)
                    for (int e = 0; e < 4; e++)
                        c[64 * g + 4 * j + e] = (uint8_t)(q[4 * g + e] | (q[16 + 4 * g + e] << 4));
                d[j] = float_to_half(w->d[(size_t)n * out->blocks + b]);
                m[j] = float_to_half(w->m[(size_t)n * out->blocks + b]);
            }
        }
    return OK;
}

static int pack_q80(const q80_t *w, pq_t *out) {
    if (!w->qs || !w->d || w->n < 1 || w->k < 32 || w->k % 32) return ERR_ARGUMENT;
    out->n = w->n, out->k = w->k, out->blocks = w->k / 32, out->tiles = (w->n + TILE - 1) / TILE;
    out->data = alloc64((size_t)out->tiles * out->blocks * Q8_CHUNK);
    if (!out->data) return ERR_MEMORY;
    for (int t = 0; t < out->tiles; t++)
        for (int b = 0; b < out->blocks; b++) {
            uint8_t *c = out->data + ((size_t)t * out->blocks + b) * Q8_CHUNK;
            uint16_t *d = (uint16_t *)(c + 512);
            for (int j = 0; j < TILE; j++) {
                const int n = t * TILE + j;
                if (n >= w->n) continue;
                const uint8_t *src = w->qs + (size_t)n * w->k + 32 * b;
                for (int g = 0; g < 8; g++)
                    for (int e = 0; e < 4; e++) c[64 * g + 4 * j + e] = src[4 * g + e];
                d[j] = float_to_half(w->d[(size_t)n * out->blocks + b]);
            }
        }
    return OK;
}

void specdec_q8_free(handle_t *h) {
    if (!h) return;
    pthread_mutex_destroy(&h->call_mu);
    if (h->layers) {
        for (int l = 0; l < h->n_layers; l++) {
            free(h->layers[l].qkv.data);
            free(h->layers[l].o.data);
            free(h->layers[l].gate_up.data);
            free(h->layers[l].down.data);
        }
        free(h->layers);
    }
    free(h->head.data);
    free(h);
}

/* Repack a model; *status = 0, or an error code (and NULL) for a bad description or no memory.
 * The handle keeps pointers to the embedding, norms and rotary tables (owned by the caller). */
handle_t *specdec_q8_new(const model_t *m, int32_t *status) {
    int st = ERR_ARGUMENT;
    handle_t *h = NULL;
    if (!m || !status) goto fail;
    if (m->n_layers < 1 || m->hidden < 32 || m->hidden % 32 || m->heads < 1 || m->kv_heads < 1 ||
        m->heads % m->kv_heads || m->head_dim < 2 || m->head_dim % 2 || m->inter < 32 || m->inter % 32 ||
        m->positions < 1 || m->vocab < 1 || !m->embed || !m->layers || !m->norm || !m->cos || !m->sin ||
        (m->layer_codes != 0 && m->layer_codes != 1))
        goto fail;
    if ((m->heads * m->head_dim) % 32 || m->head.k != m->hidden) goto fail;
    st = ERR_MEMORY;
    h = calloc(1, sizeof *h);
    if (!h) goto fail;
    pthread_mutex_init(&h->call_mu, NULL);
    h->n_layers = m->n_layers, h->hidden = m->hidden, h->heads = m->heads, h->kv_heads = m->kv_heads;
    h->head_dim = m->head_dim, h->inter = m->inter, h->positions = m->positions, h->vocab = m->vocab;
    h->eps = m->eps, h->embed = m->embed, h->norm = m->norm, h->cos = m->cos, h->sin = m->sin;
    h->layers = calloc((size_t)m->n_layers, sizeof *h->layers);
    if (!h->layers) goto fail;
    const int qkv_n = (m->heads + 2 * m->kv_heads) * m->head_dim, AD = m->heads * m->head_dim;
    for (int l = 0; l < m->n_layers; l++) {
        const layer_t *L = m->layers + l;
        player_t *P = h->layers + l;
        st = ERR_ARGUMENT;
        if (!L->norm_attn || !L->norm_mlp) goto fail;
        if (L->qkv.n != qkv_n || L->qkv.k != m->hidden || L->o.n != m->hidden || L->o.k != AD ||
            L->gate_up.n != 2 * m->inter || L->gate_up.k != m->hidden || L->down.n != m->hidden ||
            L->down.k != m->inter)
            goto fail;
        P->norm_attn = L->norm_attn, P->norm_mlp = L->norm_mlp, P->q4 = m->layer_codes == 0;
        if (P->q4) {
            if ((st = pack_q41(&L->qkv, &P->qkv)) || (st = pack_q41(&L->o, &P->o)) ||
                (st = pack_q41(&L->gate_up, &P->gate_up)) || (st = pack_q41(&L->down, &P->down)))
                goto fail;
        } else {
            const q41_t *w[4] = {&L->qkv, &L->o, &L->gate_up, &L->down};
            pq_t *out[4] = {&P->qkv, &P->o, &P->gate_up, &P->down};
            for (int i = 0; i < 4; i++) {
                const q80_t c = {w[i]->qs, w[i]->d, w[i]->n, w[i]->k};
                if ((st = pack_q80(&c, out[i]))) goto fail;
            }
        }
    }
    if ((st = pack_q80(&m->head, &h->head))) goto fail;
    *status = OK;
    return h;
fail:
    specdec_q8_free(h);
    if (status) *status = st;
    return NULL;
}

#include "leanq8_matmul.h" /* activations to int8, the integer dot products, matmul */

/* --- the rest of the forward (float32, as in leanq4.c) --------------------------------------- */




/* e^x on 16 lanes by IEEE additions and multiplications only (no libm, no FMA: -ffp-contract=off),
 * so every instruction set and every lane gives the same bits: x = n ln2 + r (Cody-Waite, n by
 * the rounding trick), e^r by Cephes' expf polynomial (about 1 ulp), times 2^n built in the
 * exponent bits. Below -87 the result is 0 (e^-87 < 2^-125: nothing a softmax or SiLU keeps),
 * above 88 it is +inf. */
static inline v16f vexp(v16f x) {
    const v16f lo = (v16f){0} - 87.0f, hi = (v16f){0} + 88.0f;
    const v16i under = x < lo, over = x > hi;
    v16f c;
    { /* clamp (selects, not min/max, so NaN handling is the same everywhere) */
        const v16i xi = (v16i)x, loi = (v16i)lo, hii = (v16i)hi;
        c = (v16f)((xi & ~(under | over)) | (loi & under) | (hii & over));
    }
    const v16f n = (c * 1.44269504088896341f + ROUND_MAGIC) - ROUND_MAGIC;
    v16f r = c - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v16f p = (v16f){0} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const v16i bits = (__builtin_convertvector(n, v16i) + 127) << 23;
    v16f y = p * (v16f)bits;
    const v16i yi = (v16i)y, inf = (v16i){0} + 0x7f800000;
    return (v16f)((yi & ~(under | over)) | (inf & over));
}

/* e^x element by element over n floats (in place), through vexp (a partial last vector padded). */
static void exp_inplace(float *x, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) storef(x + i, vexp(loadf(x + i)));
    if (i < n) {
        float t[16] = {0};
        memcpy(t, x + i, sizeof(float) * (n - i));
        storef(t, vexp(loadf(t)));
        memcpy(x + i, t, sizeof(float) * (n - i));
    }
}

/* Sum of each of 16 vectors: out[j] = the 16 lanes of a[j] added pairwise, (l, l + 8), then
 * (l, l + 4), (l, l + 2), (l, l + 1): a fixed tree, so a key's score has one summation order. */
static inline v16f hsum16(const v16f *a) {
    typedef int32_t m16 __attribute__((vector_size(64)));
    const m16 L1 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const m16 H1 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    const m16 L2 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const m16 H2 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    const m16 L3 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const m16 H3 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
    const m16 L4 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const m16 H4 = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    v16f b[8], c[4], d[2];
    for (int i = 0; i < 8; i++)
        b[i] = __builtin_shuffle(a[2 * i], a[2 * i + 1], L1) + __builtin_shuffle(a[2 * i], a[2 * i + 1], H1);
    for (int i = 0; i < 4; i++)
        c[i] = __builtin_shuffle(b[2 * i], b[2 * i + 1], L2) + __builtin_shuffle(b[2 * i], b[2 * i + 1], H2);
    for (int i = 0; i < 2; i++)
        d[i] = __builtin_shuffle(c[2 * i], c[2 * i + 1], L3) + __builtin_shuffle(c[2 * i], c[2 * i + 1], H3);
    return __builtin_shuffle(d[0], d[1], L4) + __builtin_shuffle(d[0], d[1], H4);
}


/* The cache slot of key t of a row: t itself for a chain (path NULL) and for the cached prefix
 * (t < start); for a tree node, path[t - start], its ancestors' slots root-down and then its own. */
#define SLOT(t) ((size_t)(path && (t) >= start ? path[(t) - start] : (t)))

/* One row's G query heads that share a key/value head (grouped-query attention):
 * softmax(q_g K^T / sqrt(hd)) V over positions 0 .. end-1 for g < G (q_g at q + g hd, its scores
 * at scores + g sstride, its output at out + g hd). Each head's arithmetic is that of a head alone
 * (its own accumulators, the same order), the heads only share the loads of K and V: a block of
 * 16 keys is read once from memory for all G heads. The scores of whole blocks of 16 keys come
 * from hsum16 (head_dim a multiple of 16), the rest from dot(); which path a key takes depends on
 * end only, so a verify row and the single step at its position compute the same bits. */
static inline __attribute__((always_inline)) void attend_g(const float *q, const int G, const float *keys,
                                                           const float *values, int end, int hd, float *scores,
                                                           int sstride, float *out, const int32_t *path, int start) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int blocked = hd % 16 == 0 ? end - end % 16 : 0;
    for (int t0 = 0; t0 < blocked; t0 += 16)
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            v16f acc[16];
            for (int j = 0; j < 16; j++) {
                const float *key = keys + SLOT(t0 + j) * hd;
                v16f a = loadf(qg) * loadf(key);
                for (int i = 16; i < hd; i += 16) a = a + loadf(qg + i) * loadf(key + i);
                acc[j] = a;
            }
            storef(scores + (size_t)g * sstride + t0, hsum16(acc) * scale);
        }
    const int rest = end - blocked;
    if (hd % 16 == 0 && rest > 0) /* the last keys as a block padded with zero vectors (hsum16's tree is
                                   * dot()'s hsum: the same bits, one pass instead of one sum per key) */
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            v16f acc[16];
            for (int j = 0; j < 16; j++) {
                acc[j] = (v16f){0};
                if (j >= rest) continue;
                const float *key = keys + SLOT(blocked + j) * hd;
                v16f a = loadf(qg) * loadf(key);
                for (int i = 16; i < hd; i += 16) a = a + loadf(qg + i) * loadf(key + i);
                acc[j] = a;
            }
            float part[16];
            storef(part, hsum16(acc) * scale);
            memcpy(scores + (size_t)g * sstride + blocked, part, sizeof(float) * (size_t)rest);
        }
    float inv[G];
    for (int g = 0; g < G; g++) {
        float *sc = scores + (size_t)g * sstride;
        if (hd % 16)
            for (int t = blocked; t < end; t++) sc[t] = dot(q + (size_t)g * hd, keys + SLOT(t) * hd, hd) * scale;
        /* the largest score (exact in any order): lane maxima over whole blocks, then the rest */
        v16f lane_top = (v16f){0} - INFINITY;
        int t = 0;
        for (; t + 16 <= end; t += 16) {
            const v16f v = loadf(sc + t);
            const v16i gt = v > lane_top;
            lane_top = (v16f)(((v16i)v & gt) | ((v16i)lane_top & ~gt));
        }
        float top = -INFINITY;
        for (int l = 0; l < 16; l++)
            if (lane_top[l] > top) top = lane_top[l];
        for (; t < end; t++)
            if (sc[t] > top) top = sc[t];
        for (t = 0; t < end; t++) sc[t] = sc[t] - top;
        exp_inplace(sc, end);
        /* the softmax's total: 16 lane sums over whole blocks (hsum), then the rest in order */
        const int whole = end - end % 16;
        v16f lanes = {0};
        for (int t = 0; t < whole; t += 16) lanes = lanes + loadf(sc + t);
        float total = hsum(lanes);
        for (int t = whole; t < end; t++) total = total + sc[t];
        inv[g] = 1.0f / total;
    }
    const int nv = hd - hd % 16;
    if (nv == 64 && G <= 4) { /* SmolLM2's head_dim: per head four accumulators, each summed over t in order */
        v16f a[4][4];
        for (int g = 0; g < G; g++)
            for (int c = 0; c < 4; c++) a[g][c] = (v16f){0};
        for (int t = 0; t < end; t++) {
            const float *v = values + SLOT(t) * hd;
            const v16f v0 = loadf(v), v1 = loadf(v + 16), v2 = loadf(v + 32), v3 = loadf(v + 48);
            for (int g = 0; g < G; g++) {
                const float w = scores[(size_t)g * sstride + t];
                a[g][0] = a[g][0] + w * v0, a[g][1] = a[g][1] + w * v1;
                a[g][2] = a[g][2] + w * v2, a[g][3] = a[g][3] + w * v3;
            }
        }
        for (int g = 0; g < G; g++)
            for (int c = 0; c < 4; c++) storef(out + (size_t)g * hd + 16 * c, a[g][c] * inv[g]);
    } else {
        for (int g = 0; g < G; g++) {
            const float *sc = scores + (size_t)g * sstride;
            for (int i = 0; i < nv; i += 16) {
                v16f acc = {0};
                for (int t = 0; t < end; t++) acc = acc + sc[t] * loadf(values + SLOT(t) * hd + i);
                storef(out + (size_t)g * hd + i, acc * inv[g]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const float *sc = scores + (size_t)g * sstride;
        for (int i = nv; i < hd; i++) {
            float acc = 0.0f;
            for (int t = 0; t < end; t++) acc = acc + sc[t] * values[SLOT(t) * hd + i];
            out[(size_t)g * hd + i] = acc * inv[g];
        }
    }
}

/* attend_g with the group size a constant (its accumulators then stay in registers), and SmolLM2's
 * head_dim 64 a constant too (its key loops unroll); a group of more than 4 heads runs head by head
 * (the same arithmetic per head). */
static void attend_group(const float *q, int G, const float *keys, const float *values, int end, int hd,
                         float *scores, int sstride, float *out, const int32_t *path, int start) {
#define ATTEND_GROUPS(HD)                                                                              \
    switch (G) {                                                                                       \
    case 1: attend_g(q, 1, keys, values, end, HD, scores, sstride, out, path, start); break;           \
    case 2: attend_g(q, 2, keys, values, end, HD, scores, sstride, out, path, start); break;           \
    case 3: attend_g(q, 3, keys, values, end, HD, scores, sstride, out, path, start); break;           \
    case 4: attend_g(q, 4, keys, values, end, HD, scores, sstride, out, path, start); break;           \
    default:                                                                                           \
        for (int g = 0; g < G; g++)                                                                    \
            attend_g(q + (size_t)g * hd, 1, keys, values, end, HD, scores + (size_t)g * sstride, sstride, \
                     out + (size_t)g * hd, path, start);                                               \
    }
    if (hd == 64) ATTEND_GROUPS(64) /* SmolLM2's head_dim as a constant: the key loops unroll */
    else ATTEND_GROUPS(hd)
#undef ATTEND_GROUPS
}

/* SiLU(g) u over n elements (gate g, up u): g / (1 + e^-g) * u, through vexp. */
static void silu_mul(const float *g, const float *u, int n, float *out) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const v16f gv = loadf(g + i);
        storef(out + i, gv / (1.0f + vexp(-gv)) * loadf(u + i));
    }
    if (i < n) {
        float tg[16] = {0}, tu[16] = {0}, to[16];
        memcpy(tg, g + i, sizeof(float) * (n - i));
        memcpy(tu, u + i, sizeof(float) * (n - i));
        const v16f gv = loadf(tg);
        storef(to, gv / (1.0f + vexp(-gv)) * loadf(tu));
        memcpy(out + i, to, sizeof(float) * (n - i));
    }
}

#include "leanq8_rows.h" /* the row-wise work between products, split over the pool by rows */

/* A call's tree (NULL for a chain): row r sits at depth[r] (0 for a child of the cached prefix) and
 * attends to the prefix, slots 0 .. prefix-1, and then to the slots path + off[r] (depth[r] + 1 of
 * them, root-down). The prefix is the call's start, or less when the tree hangs below nodes that
 * earlier calls wrote (specdec_q8_forward_spec). */
typedef struct {
    const int32_t *depth, *off, *path;
    int prefix;
} tree_t;

typedef struct {
    const handle_t *h;
    const float *qkv, *kc, *vc;
    int k, start, capacity;
    float *scores, *att;
    const tree_t *tree;
    int per_head; /* units of one query head each (else one key/value head with its group) */
} att_job_t;

static void att_part(void *arg, int part, int parts) {
    const att_job_t *j = arg;
    const handle_t *h = j->h;
    const int hd = h->head_dim, nh = h->heads, kv = h->kv_heads, group = nh / kv;
    const int qkv_n = (nh + 2 * kv) * hd, AD = nh * hd, end_max = j->start + j->k;
    /* units: (row, key/value head), each with its group of query heads; or (row, query head) */
    const int per = j->per_head ? nh : kv, n = j->per_head ? 1 : group;
    const int units = j->k * per, u0 = (int)((int64_t)units * part / parts), u1 = (int)((int64_t)units * (part + 1) / parts);
    for (int u = u0; u < u1; u++) {
        const int r = u / per, jh = j->per_head ? u % per : (u % per) * group, kvh = jh / group;
        const float *row = j->qkv + (size_t)r * qkv_n;
        const tree_t *tr = j->tree;
        attend_group(row + (size_t)jh * hd, n, j->kc + (size_t)kvh * j->capacity * hd,
                     j->vc + (size_t)kvh * j->capacity * hd, (tr ? tr->prefix + tr->depth[r] : j->start + r) + 1, hd,
                     j->scores + ((size_t)r * nh + jh) * end_max, end_max, j->att + (size_t)r * AD + (size_t)jh * hd,
                     tr ? tr->path + tr->off[r] : NULL, tr ? tr->prefix : j->start);
    }
}

/* Keys times query heads of a call below which its attention runs on the calling thread alone. */
#ifndef ATT_MIN_WORK
#define ATT_MIN_WORK 1024
#endif

/* Rotary embedding and cache writes for the k new rows, then attention: row r attends to
 * positions 0 .. start + r, exactly as a one-token step there; each unit, a (row, key/value head)
 * with its group of query heads or, in calls of few rows, a (row, query head), is computed whole by
 * one thread. In a tree call (tree not NULL)
 * row r is still written at slot start + r but rotated at position start + depth[r], and attends
 * to slots 0 .. start-1 and then its path's slots: the keys, in the order, of the chain over its
 * path, so the same arithmetic (the blocking of attend_g depends on the number of keys only). */
static void attention(const handle_t *h, float *qkv, int k, int start, float *kc, float *vc, int capacity,
                      float *scores, float *att, pool_t *pool, const tree_t *tree) {
    const int hd = h->head_dim, nh = h->heads, kv = h->kv_heads;
    const int qkv_n = (nh + 2 * kv) * hd;
    for (int r = 0; r < k; r++) {
#if SPECDEC_Q8_FAULT == 4 /* test hook: a tree below earlier calls' nodes rotated as if hung at start */
        const int pos = tree ? start + tree->depth[r] : start + r, slot = start + r;
#else
        const int pos = tree ? tree->prefix + tree->depth[r] : start + r, slot = start + r;
#endif
        float *row = qkv + (size_t)r * qkv_n;
        for (int j = 0; j < nh + kv; j++)
            rotate(row + (size_t)j * hd, h->cos + (size_t)pos * hd, h->sin + (size_t)pos * hd, hd);
        for (int j = 0; j < kv; j++) {
            memcpy(kc + ((size_t)j * capacity + slot) * hd, row + (size_t)(nh + j) * hd, sizeof(float) * hd);
            memcpy(vc + ((size_t)j * capacity + slot) * hd, row + (size_t)(nh + kv + j) * hd, sizeof(float) * hd);
        }
    }
    const int pairs = k * nh, threads = pool ? pool->workers + 1 : 1;
    /* Short contexts are not worth waking a thread for. Fewer (row, key/value head) units than twice the
     * threads split unevenly (one row's 3 over 2 threads: 2 + 1), so such calls split by query head
     * (9: 5 + 4), each head alone doing the arithmetic it does in its group (attend_g). */
    const int per_head = threads > 1 && k * kv < 2 * threads;
    const int units = per_head ? pairs : k * kv;
    const int parts = (size_t)(start + k) * pairs < ATT_MIN_WORK ? 1 : (threads < units ? threads : units);
    att_job_t job = {h, qkv, kc, vc, k, start, capacity, scores, att, tree, per_head};
    pool_run(pool, att_part, &job, parts);
}


#define PHASE(which, ...)                                                                             \
    do {                                                                                              \
        const double t0_ = h->profiling ? now() : 0.0;                                                \
        __VA_ARGS__;                                                                                  \
        if (h->profiling) h->phase_s[which] += now() - t0_;                                           \
    } while (0)

/* Turn this model's phase clocks on (1) or off (0); reading them (specdec_q8_profile) resets them. */
int32_t specdec_q8_set_profiling(handle_t *h, int32_t on) {
    if (!h || (on != 0 && on != 1)) return ERR_ARGUMENT;
    h->profiling = on;
    return OK;
}

int32_t specdec_q8_profile(handle_t *h, double *out, int32_t n) {
    if (!h || !out || n != PHASES) return ERR_ARGUMENT;
    for (int i = 0; i < PHASES; i++) out[i] = h->phase_s[i], h->phase_s[i] = 0.0;
    return OK;
}

/* Logits of the k tokens ids (or the k embedding rows embeds, (k, hidden)) placed at positions
 * start .. start+k-1 through the first n_layers layers, for the last `keep` rows (logits: keep x
 * head.n). cache: (n_layers, 2, kv_heads, capacity, head_dim), holding positions 0 .. start-1; the
 * new tokens' keys and values are written. features (NULL or (k, hidden)): every row's residual
 * after the n_layers layers, before the final norm. Returns 0, ERR_ARGUMENT for arguments out of
 * range (nothing written), ERR_MEMORY. */
static int forward_locked(handle_t *h, const int64_t *ids, const float *embeds, int32_t k, int32_t start,
                          float *cache, int32_t capacity, float *logits, int32_t keep, int32_t n_layers,
                          pool_t *pool, const tree_t *tree, float *features);

/* The process's pool for a call on `threads` threads (NULL for one), locked until pool_give. */
static pool_t *pool_take(int threads) {
    if (threads == 1) return NULL;
    pthread_mutex_lock(&process_pool_mu); /* one caller at a time */
    if (process_pool && process_pool->workers != threads - 1) pool_free(process_pool), process_pool = NULL;
    if (!process_pool) process_pool = pool_new(threads - 1); /* NULL (no threads): runs on one */
    return process_pool;
}

static void pool_give(int threads) {
    if (threads > 1) pthread_mutex_unlock(&process_pool_mu);
}

/* parents (NULL for a chain) covers slots prefix .. start+k-1: parents[i] in [-1, i - 1] is slot
 * prefix + i's parent (as prefix + parents[i]; -1: a child of the prefix); the entries before start -
 * prefix describe nodes earlier calls wrote, the last k this call's rows. */
static int32_t forward_checked(handle_t *h, const int64_t *ids, const float *embeds, const int32_t *parents,
                               int32_t k, int32_t start, int32_t prefix, float *cache, int32_t capacity,
                               float *logits, int32_t keep, int32_t n_layers, int32_t threads, float *features) {
    if (!h || !ids == !embeds || !cache || !logits) return ERR_ARGUMENT; /* exactly one of ids, embeds */
    if (k < 1 || keep < 1 || keep > k || start < 0 || capacity < 1 || capacity > h->positions ||
        start > capacity - k || n_layers < 1 || n_layers > h->n_layers || threads < 1 || threads > 1024)
        return ERR_ARGUMENT;
    for (int r = 0; ids && r < k; r++)
        if (ids[r] < 0 || ids[r] >= h->vocab) return ERR_ARGUMENT;
    if (prefix < 0 || prefix > start || (!parents && prefix != start)) return ERR_ARGUMENT;
    const int before = start - prefix, n = before + k; /* the speculative region's nodes */
    if (parents)
        for (int i = 0; i < n; i++)
            if (parents[i] < -1 || parents[i] >= i) return ERR_ARGUMENT;
    tree_t tree = {NULL, NULL, NULL, prefix};
    int32_t *depth = NULL, *off = NULL, *path = NULL;
    if (parents) { /* each node's depth; each row's path's slots, root-down */
        if (tree_paths(parents, n, k, prefix, &depth, &off, &path) != 0) return ERR_MEMORY;
        tree = (tree_t){depth + before, off, path, prefix};
    }
    pthread_mutex_lock(&h->call_mu);
    pool_t *pool = pool_take(threads);
    const int status = forward_locked(h, ids, embeds, k, start, cache, capacity, logits, keep, n_layers, pool,
                                      parents ? &tree : NULL, features);
    pool_give(threads);
    pthread_mutex_unlock(&h->call_mu);
    free(depth), free(off), free(path);
    return status;
}

int32_t specdec_q8_forward(handle_t *h, const int64_t *ids, int32_t k, int32_t start, float *cache,
                           int32_t capacity, float *logits, int32_t keep, int32_t n_layers, int32_t threads) {
    return forward_checked(h, ids, NULL, NULL, k, start, start, cache, capacity, logits, keep, n_layers, threads,
                           NULL);
}

/* specdec_q8_forward over a tree of k nodes: parents[r] in [-1, r - 1] (-1: a child of the cached
 * prefix; ERR_ARGUMENT otherwise, nothing written). Node r's key and value go to slot start + r,
 * its position is start + its depth, and it attends to slots 0 .. start-1 and its ancestors' and
 * its own slots, root-down: its logits equal, bit for bit, those of the chain over its path. */
int32_t specdec_q8_forward_tree(handle_t *h, const int64_t *ids, const int32_t *parents, int32_t k, int32_t start,
                                float *cache, int32_t capacity, float *logits, int32_t keep, int32_t n_layers,
                                int32_t threads) {
    if (!parents) return ERR_ARGUMENT;
    return forward_checked(h, ids, NULL, parents, k, start, start, cache, capacity, logits, keep, n_layers,
                           threads, NULL);
}

/* Both of the above (ABI 5), and more: exactly one of ids (k token ids) and embeds (k rows of hidden
 * floats, used in place of the embedding's rows); parents NULL (a chain) or a tree's; features NULL
 * or (k, hidden): every row's residual after the n_layers layers, before the final norm. */
int32_t specdec_q8_forward_ex(handle_t *h, const int64_t *ids, const float *embeds, const int32_t *parents,
                              int32_t k, int32_t start, float *cache, int32_t capacity, float *logits,
                              int32_t keep, int32_t n_layers, int32_t threads, float *features) {
    return forward_checked(h, ids, embeds, parents, k, start, start, cache, capacity, logits, keep, n_layers,
                           threads, features);
}

/* specdec_q8_forward_ex over a tree hung below nodes that earlier calls wrote (ABI 8): slots 0 ..
 * prefix-1 hold the committed prefix, slots prefix .. start-1 earlier calls' tree nodes, and
 * parents (start - prefix + k entries, parents[i] in [-1, i - 1], -1: a child of the prefix) gives
 * every node's parent, this call's k rows last. Row r is written at slot start + r, rotated at
 * position prefix + its depth, and attends to slots 0 .. prefix-1 and then its path's slots,
 * root-down: its logits equal, bit for bit, those of the chain over its path (EAGLE-2's expansion
 * computes each node once). */
int32_t specdec_q8_forward_spec(handle_t *h, const int64_t *ids, const float *embeds, const int32_t *parents,
                                int32_t k, int32_t start, int32_t prefix, float *cache, int32_t capacity,
                                float *logits, int32_t keep, int32_t n_layers, int32_t threads, float *features) {
    if (!parents) return ERR_ARGUMENT;
    return forward_checked(h, ids, embeds, parents, k, start, prefix, cache, capacity, logits, keep, n_layers,
                           threads, features);
}

static int forward_locked(handle_t *h, const int64_t *ids, const float *embeds, int32_t k, int32_t start,
                          float *cache, int32_t capacity, float *logits, int32_t keep, int32_t n_layers,
                          pool_t *pool, const tree_t *tree, float *features) {
    const int H = h->hidden, hd = h->head_dim, nh = h->heads, kv = h->kv_heads, I = h->inter;
    const int qkv_n = (nh + 2 * kv) * hd, AD = nh * hd;
    const int KMAX = I > AD ? (I > H ? I : H) : (AD > H ? AD : H);
    const int end_max = start + k;
    const size_t nf = (size_t)k * (2 * H + qkv_n + AD + 3 * I) + (size_t)k * nh * end_max + 16;
    float *buf = (float *)malloc(sizeof(float) * nf);
    qx_t qx;
    if (!buf) return ERR_MEMORY;
    if (qx_alloc(&qx, k, KMAX) != OK) {
        free(buf);
        return ERR_MEMORY;
    }
    float *x = buf, *hb = x + (size_t)k * H, *qkv = hb + (size_t)k * H, *att = qkv + (size_t)k * qkv_n;
    float *gu = att + (size_t)k * AD, *act = gu + (size_t)k * 2 * I, *scores = act + (size_t)k * I;
    PHASE(PH_OTHER, for (int r = 0; r < k; r++) {
        const float *row = embeds ? embeds + (size_t)r * H : h->embed + (size_t)ids[r] * H;
        memcpy(x + (size_t)r * H, row, sizeof(float) * H);
    });
    const size_t plane = (size_t)kv * capacity * hd;
    for (int l = 0; l < n_layers; l++) {
        const player_t *L = h->layers + l;
        float *kc = cache + (size_t)l * 2 * plane, *vc = kc + plane;
        PHASE(PH_OTHER, rows_then_quantize(ROWS_NORM, x, H, k, H, L->norm_attn, h->eps, hb, &qx, pool));
        PHASE(PH_LINEAR, matmul(&L->qkv, L->q4, &qx, k, qkv, qkv_n, 0, pool));
        PHASE(PH_ATTENTION, attention(h, qkv, k, start, kc, vc, capacity, scores, att, pool, tree));
        PHASE(PH_OTHER, rows_then_quantize(ROWS_PLAIN, att, AD, k, AD, NULL, 0.0f, NULL, &qx, pool));
        PHASE(PH_LINEAR, matmul(&L->o, L->q4, &qx, k, x, H, 1, pool));
        PHASE(PH_OTHER, rows_then_quantize(ROWS_NORM, x, H, k, H, L->norm_mlp, h->eps, hb, &qx, pool));
        PHASE(PH_LINEAR, matmul(&L->gate_up, L->q4, &qx, k, gu, 2 * I, 0, pool));
        PHASE(PH_OTHER, rows_then_quantize(ROWS_SILU, gu, 2 * I, k, I, NULL, 0.0f, act, &qx, pool));
        PHASE(PH_LINEAR, matmul(&L->down, L->q4, &qx, k, x, H, 1, pool));
    }
    const int first = k - keep;
    if (features) memcpy(features, x, sizeof(float) * (size_t)k * H); /* pre-norm, every row */
    PHASE(PH_OTHER, rows_then_quantize(ROWS_NORM, x + (size_t)first * H, H, keep, H, h->norm, h->eps, hb, &qx, pool));
    PHASE(PH_HEAD, matmul(&h->head, 0, &qx, keep, logits, h->head.n, 0, pool));
    free(buf), qx_free(&qx);
    return OK;
}

/* Where the build and the CPU have AMX-INT8 (and Linux grants the tile state), calls of several rows
 * use its tiles (leanq8_matmul.h): mode -1 asks, 0 turns them off (the register tiles only), 1 on for
 * calls of enough rows (the default), 2 on for every call of 2 rows or more. The same integers, so the
 * same bits, either way. Process-wide; returns the mode in effect, -3 where there is no AMX, or
 * ERR_ARGUMENT. */
int32_t specdec_q8_amx(int32_t mode) {
    if (mode < -1 || mode > 2) return ERR_ARGUMENT;
    return amx_switch(mode);
}

/* --- a standalone Q8_0 linear (small heads): y = x W^T as the LM head computes it --------------- */

typedef struct {
    pq_t w;
} lin_t;

void specdec_q8_linear_free(lin_t *l) {
    if (l) free(l->w.data), free(l);
}

/* Repack a Q8_0 weight (n, k) (k a multiple of 32); *status = 0, or an error code (and NULL). */
lin_t *specdec_q8_linear_new(const q80_t *w, int32_t *status) {
    lin_t *l = NULL;
    int st = ERR_ARGUMENT;
    if (!status) return NULL;
    if (w && (l = calloc(1, sizeof *l)) == NULL) st = ERR_MEMORY;
    if (l && (st = pack_q80(w, &l->w)) != OK) specdec_q8_linear_free(l), l = NULL;
    *status = st;
    return l;
}

/* y (rows x n) = x (rows x k) W^T: each row quantized per block of 32 (quantize), then the head's
 * matmul on the process's pool; each row's bits do not depend on rows or threads. Returns 0,
 * ERR_ARGUMENT (nothing written), ERR_MEMORY. */
int32_t specdec_q8_linear(lin_t *l, const float *x, int32_t rows, float *y, int32_t threads) {
    if (!l || !x || !y || rows < 1 || threads < 1 || threads > 1024) return ERR_ARGUMENT;
    const int K = l->w.k;
    qx_t qx;
    if (qx_alloc(&qx, rows, K) != OK) return ERR_MEMORY;
    quantize(x, rows, K, &qx);
    pool_t *pool = pool_take(threads);
    matmul(&l->w, 0, &qx, rows, y, l->w.n, 0, pool);
    pool_give(threads);
    qx_free(&qx);
    return OK;
}

#include "leanq8_peak.h" /* specdec_q8_peak: the arithmetic peaks the verify curve's floor divides by */

#include "leanq8_topk.h" /* specdec_topk, specdec_q8_linear_topk: a drafter's head and its top tokens */

#include "leanq8_sample.h" /* specdec_sample_cdf: one draw from a row of weights (a plain step's token) */

#include "leanq8_eagle.h" /* specdec_q8_eagle_inputs, specdec_q8_eagle_level: one EAGLE level, one call */

#include "leanq8_heads.h" /* specdec_q8_medusa, specdec_q8_mlp_stage: Medusa's heads, an MLP stage, one call */

#include "leanq8_suffix.h" /* specdec_sfx_*: suffix decoding's trie and its speculation */
