/* leanq8.c's int8 matrix products, included once by it after the repacked weights' types (pq_t) and the
 * thread pool: activations quantized to int8 per block of 32 (quantize_row, quantize), weights decoded
 * from their repacked tiles, the integer dot products and the float epilogue, in three kernels that
 * give the same integers and therefore the same bits:
 *
 *   - register tiles (every build): a tile of 16 output columns times up to RT = 8 rows of the call;
 *     each weight block is loaded and decoded once for all of them (vpdpbusd on AVX512-VNNI, on 8 lanes
 *     twice on AVX-VNNI, vpmaddubsw on AVX2, C loops elsewhere); a wider call runs in passes of at
 *     most 8 rows, split evenly (9 rows: 5 + 4, not 8 + 1);
 *   - AMX tiles (AVX512-VNNI builds whose compiler targets AMX-INT8, used only where CPUID has it and
 *     Linux grants the tile state, for calls of 8 rows and more on Q8_0, 12 on Q4_1): passes of up to
 *     16 rows split evenly (17 rows: 9 + 8), one TDPBSSD per (block, column tile) for all of a pass's
 *     rows; int32 sums exactly as vpdpbusd's.
 *
 * The float epilogue is one sequence of operations per (row, block, 16 columns) on every path:
 * acc = acc + (d dx) isum, then for Q4_1 acc = acc + m s, in block order, compiled with
 * -ffp-contract=off; the block's d and m are loaded once for all rows. Part of the build key like
 * every header beside the sources (specdec/engine/native.py).
 *
 * SPECDEC_Q8_FAULT (a test hook, never set in a real build): 1 reads rows 1.. of a multi-row tile at a
 * wrong row stride, 2 scales them by the previous block's activation scale (stale), 3 misconfigures
 * the AMX tiles (8 rows high: rows 8 .. 15 of a pass keep stale sums); tests/test_native_tiles.py
 * builds each and sees rows stop equalling single steps. 4 (in leanq8.c) rotates a tree hung below
 * earlier calls' nodes as if it hung at the call's start; tests/test_drafter_kernels.py sees its
 * nodes stop equalling their chains.
 */
#ifndef SPECDEC_LEANQ8_MATMUL_H
#define SPECDEC_LEANQ8_MATMUL_H

#ifndef SPECDEC_Q8_FAULT
#define SPECDEC_Q8_FAULT 0
#endif

/* --- activations ---------------------------------------------------------------------------- */

/* 16 half floats -> float32, exact (F16C / AVX-512 conversion, else the C function above). */
static inline v16f load_half16(const uint8_t *p) {
    v16f v;
#if defined(ISA_AVX512VNNI)
    const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    memcpy(&v, &f, sizeof v);
#elif defined(__F16C__)
    const __m256 f[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)))};
    memcpy(&v, f, sizeof v);
#else
    uint16_t h[16];
    memcpy(h, p, sizeof h);
    for (int i = 0; i < 16; i++) v[i] = half_to_float(h[i]);
#endif
    return v;
}

/* A call's activations quantized per block of 32 (Q8_1), row r at q + r k: q, dx, s = dx * sum(q),
 * and sum(q). The buffers hold qx_rows(rows) rows (AMX reads whole passes of 16). */
typedef struct {
    int8_t *q;
    float *dx, *s;
    int32_t *sum;
    int k, blocks;
} qx_t;

/* Rows a buffer for a call of `rows` rows holds: a whole number of AMX passes beyond 16 rows. */
static inline size_t qx_rows(int rows) { return rows > 16 ? (size_t)(rows + 15) / 16 * 16 : (size_t)rows; }

/* Buffers for `rows` rows of up to kmax inputs (zeroed: padding rows are read, never used); 0 or
 * ERR_MEMORY. */
static int qx_alloc(qx_t *x, int rows, int kmax) {
    const size_t n = qx_rows(rows), nb = n * (size_t)(kmax / 32);
    x->q = NULL; /* 64-byte aligned: AMX loads rows of 32 bytes that must not straddle cache lines */
    if (posix_memalign((void **)&x->q, 64, n * (size_t)kmax + 64) != 0) x->q = NULL;
    if (x->q) memset(x->q, 0, n * (size_t)kmax + 64);
    x->dx = calloc(2 * nb + 16, sizeof(float));
    x->s = x->dx ? x->dx + nb : NULL;
    x->sum = calloc(nb + 16, sizeof(int32_t));
    x->k = x->blocks = 0;
    if (x->q && x->dx && x->sum) return OK;
    free(x->q), free(x->dx), free(x->sum);
    x->q = NULL, x->dx = x->s = NULL, x->sum = NULL;
    return ERR_MEMORY;
}

static void qx_free(qx_t *x) { free(x->q), free(x->dx), free(x->sum); }

/* Rounding to the nearest integer, ties to even, by adding and subtracting 1.5 * 2^23: plain IEEE
 * additions (valid for |v| < 2^22; here |v| <= 127), so every path rounds alike. */
static const float ROUND_MAGIC = 12582912.0f;

static inline v16i vclamp(v16i v, v16i lim) {
    const v16i hi = v > lim, lo = v < -lim;
    v = (v & ~hi) | (lim & hi);
    return (v & ~lo) | (-lim & lo);
}

typedef int8_t v16c __attribute__((vector_size(16)));

/* Integer lane reductions (exact in any order). */
static inline v16i vmax(v16i a, v16i b) {
    const v16i gt = a > b;
    return (a & gt) | (b & ~gt);
}

static inline int32_t vmax_lanes(v16i v) {
    typedef int32_t m16 __attribute__((vector_size(64)));
    v16i t = __builtin_shuffle(v, (m16){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
    v = vmax(v, t);
    t = __builtin_shuffle(v, (m16){4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
    v = vmax(v, t);
    t = __builtin_shuffle(v, (m16){2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
    v = vmax(v, t);
    t = __builtin_shuffle(v, (m16){1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
    v = vmax(v, t);
    return v[0];
}

static inline int32_t vsum_lanes(v16i v) {
    typedef int32_t m16 __attribute__((vector_size(64)));
    v = v + __builtin_shuffle(v, (m16){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
    v = v + __builtin_shuffle(v, (m16){4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
    v = v + __builtin_shuffle(v, (m16){2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
    v = v + __builtin_shuffle(v, (m16){1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
    return v[0];
}

static void quantize_row(const float *x, int k, int8_t *q, float *dx, float *s, int32_t *sum) {
    const v16i absmask = (v16i){0} + 0x7fffffff;
    for (int b = 0; b < k / 32; b++) {
        const float *xb = x + 32 * b;
        const v16f lo = loadf(xb), hi = loadf(xb + 16);
        v16i ai, bi;
        memcpy(&ai, &lo, sizeof ai);
        memcpy(&bi, &hi, sizeof bi);
        ai &= absmask, bi &= absmask; /* |x| as bits: ordered like the floats (no NaN here) */
        const v16i gt = ai > bi, mx = (ai & gt) | (bi & ~gt);
        const int32_t top = vmax_lanes(mx); /* >= 0: the bits of max |x| */
        float amax;
        memcpy(&amax, &top, sizeof amax);
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        const v16f rl = (lo * id + ROUND_MAGIC) - ROUND_MAGIC, rh = (hi * id + ROUND_MAGIC) - ROUND_MAGIC;
        v16i ql = __builtin_convertvector(rl, v16i), qh = __builtin_convertvector(rh, v16i);
        const v16i lim = (v16i){0} + 127;
        ql = vclamp(ql, lim), qh = vclamp(qh, lim);
        const v16c cl = __builtin_convertvector(ql, v16c), ch = __builtin_convertvector(qh, v16c);
        memcpy(q + 32 * b, &cl, 16);
        memcpy(q + 32 * b + 16, &ch, 16);
        const int32_t total = vsum_lanes(ql + qh);
        dx[b] = d, sum[b] = total, s[b] = d * (float)total;
    }
}

static void quantize(const float *x, int rows, int k, qx_t *out) {
    out->k = k, out->blocks = k / 32;
    for (int r = 0; r < rows; r++)
        quantize_row(x + (size_t)r * k, k, out->q + (size_t)r * k, out->dx + (size_t)r * out->blocks,
                     out->s + (size_t)r * out->blocks, out->sum + (size_t)r * out->blocks);
}

/* Row r (of the call) of block b: its int8 codes, and the index of its scales. The fault hooks break
 * rows 1.. of a multi-row tile only, so single steps stay right and rows stop equalling them. */
static inline const int8_t *xrow(const qx_t *x, int r, int b) {
#if SPECDEC_Q8_FAULT == 1
    return x->q + (size_t)r * (x->k - 32 * (r > 0)) + 32 * b; /* a wrong row stride */
#else
    return x->q + (size_t)r * x->k + 32 * b;
#endif
}

static inline size_t xidx(const qx_t *x, int r, int b) {
#if SPECDEC_Q8_FAULT == 2
    return (size_t)r * x->blocks + (size_t)(b > 0 && r > 0 ? b - 1 : b); /* a stale block scale */
#else
    return (size_t)r * x->blocks + (size_t)b;
#endif
}

static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The float epilogue of one (row, block, 16 columns): the same operations in the same order on every
 * path (and on the AVX2 path half by half, lane for lane the same). */
#define EPILOGUE(acc, isum_f, d, m, dx, s, q4)                                                          \
    do {                                                                                               \
        (acc) = (acc) + ((d) * (dx)) * (isum_f);                                                       \
        if (q4) (acc) = (acc) + (m) * (s);                                                             \
    } while (0)

/* Write (or add) R rows of one tile's 16 columns (nn of them real). */
static inline __attribute__((always_inline)) void store_rows(const v16f *acc, int R, float *y, int ldy, int r0,
                                                             int n0, int nn, int add) {
    for (int r = 0; r < R; r++) {
        float *yr = y + (size_t)(r0 + r) * ldy + n0;
        float v[TILE];
        storef(v, acc[r]);
        if (add)
            for (int j = 0; j < nn; j++) yr[j] = yr[j] + v[j];
        else
            memcpy(yr, v, sizeof(float) * nn);
    }
}

/* --- register tiles ------------------------------------------------------------------------- */

/* Ask for block b of the tile two ahead while the rows of this one compute on block b (the first pass only):
 * with several rows a tile's arithmetic outlasts the loads of its codes, and the hardware's own
 * prefetchers then fall behind (measured on a 2-core AMD EPYC: 8 rows over weights streamed from memory
 * took 1.5 times as long as over weights in cache, 12 rows 2.2 times). Loads only: no arithmetic changes.
 * On the AVX-512 path only for Q4_1 tiles of calls of several rows: on a 2-core AMD EPYC Zen 4 (CPU flags
 * fb86c92f) the Q8_0 head's prefetches slowed it at every k (one row at 1 thread: 1.09 -> 1.32 ms against
 * the library without them), and a one-row call's stream is one the hardware prefetchers keep up with
 * (dev runs of verify-kernels; the engine record of the change says what it bought). The AVX2 path keeps
 * them for every tile (not measured on such a machine). */
#define PREFETCH_BLOCK(p, bytes)                                                                         \
    do {                                                                                               \
        for (size_t off_ = 0; off_ < (bytes); off_ += 64) __builtin_prefetch((const char *)(p) + off_, 0, 3); \
    } while (0)

/* Rows per register tile. AVX-512: 8 int and 8 float accumulators, 8 decoded weight vectors, d, m (26 of 32
 * registers). AVX2 / AVX-VNNI spill some float accumulators to L1 at 8 rows and still beat 4 (measured on
 * an emulated AVX2 build: 8 rows 15-17 ms of matmuls at 1 thread against 17-20 at 4). */
#define RT 8

#if defined(ISA_AVX512VNNI)

/* Rows r0 .. r0+R-1 of one tile: y[r][n] (+)= sum over blocks, in block order, of
 * ((d dx) isum + m s) (Q4_1) or (d dx) isum (Q8_0). One block's weights are loaded and decoded once
 * for the R rows; each row's int32 sums come from 8 vpdpbusd (Q8_0: on w + 128, less 128 sum(x)). */
static inline __attribute__((always_inline)) void tile_rows(const pq_t *w, const int q4, int tile, const qx_t *x,
                                                            int r0, const int R, float *y, int ldy, int add) {
    v16f acc[RT];
    for (int r = 0; r < R; r++) acc[r] = (v16f){0};
    const size_t chunk = q4 ? Q4_CHUNK : Q8_CHUNK;
    const __m512i mask = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80);
    const size_t ahead = q4 && R > 1 && r0 == 0 && tile + 2 < w->tiles ? 2 * (size_t)w->blocks * chunk : 0;
    for (int b = 0; b < w->blocks; b++) {
        const uint8_t *c = w->data + ((size_t)tile * w->blocks + b) * chunk;
        if (ahead) PREFETCH_BLOCK(c + ahead, chunk);
        __m512i wv[8];
        if (q4)
            for (int g = 0; g < 4; g++) {
                const __m512i v = _mm512_loadu_si512((const void *)(c + 64 * g));
                wv[g] = _mm512_and_si512(v, mask);
                wv[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
            }
        else
            for (int g = 0; g < 8; g++) wv[g] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(c + 64 * g)), flip);
        __m512i s0[RT], s1[RT]; /* two chains per row when the rows are few (integer sums: any order) */
        const int two = R < 4;
        for (int r = 0; r < R; r++) s0[r] = _mm512_setzero_si512(), s1[r] = _mm512_setzero_si512();
        for (int g = 0; g < 8; g++)
            for (int r = 0; r < R; r++) {
                const __m512i xb = _mm512_set1_epi32(load4(xrow(x, r0 + r, b) + 4 * g));
                if (two && (g & 1)) s1[r] = _mm512_dpbusd_epi32(s1[r], wv[g], xb);
                else s0[r] = _mm512_dpbusd_epi32(s0[r], wv[g], xb);
            }
        const v16f d = load_half16(c + (q4 ? 256 : 512));
        const v16f m = q4 ? load_half16(c + 256 + 32) : (v16f){0};
        for (int r = 0; r < R; r++) {
            const size_t i = xidx(x, r0 + r, b);
            __m512i is = two ? _mm512_add_epi32(s0[r], s1[r]) : s0[r];
            if (!q4) is = _mm512_sub_epi32(is, _mm512_set1_epi32(128 * x->sum[i])); /* (w + 128) x - 128 x */
            v16i isum;
            memcpy(&isum, &is, sizeof isum);
            EPILOGUE(acc[r], __builtin_convertvector(isum, v16f), d, m, x->dx[i], x->s[i], q4);
        }
    }
    const int n0 = tile * TILE;
    store_rows(acc, R, y, ldy, r0, n0, w->n - n0 < TILE ? w->n - n0 : TILE, add);
}

#elif defined(ISA_AVXVNNI) || defined(ISA_AVX2)

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* As above, one half tile (8 columns) at a time: its 8 decoded weight vectors are loaded once for the
 * R rows; the epilogue lane for lane the one of the 16-lane paths. */
static inline __attribute__((always_inline)) void tile_rows(const pq_t *w, const int q4, int tile, const qx_t *x,
                                                            int r0, const int R, float *y, int ldy, int add) {
    v8f acc[2][RT];
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < R; r++) acc[h][r] = (v8f){0};
    const size_t chunk = q4 ? Q4_CHUNK : Q8_CHUNK;
    const __m256i mask = _mm256_set1_epi8(15);
    const size_t ahead = r0 == 0 && tile + 2 < w->tiles ? 2 * (size_t)w->blocks * chunk : 0;
    for (int b = 0; b < w->blocks; b++) {
        const uint8_t *c = w->data + ((size_t)tile * w->blocks + b) * chunk;
        if (ahead) PREFETCH_BLOCK(c + ahead, chunk);
        const v16f d16 = load_half16(c + (q4 ? 256 : 512));
        const v16f m16 = q4 ? load_half16(c + 256 + 32) : (v16f){0};
        for (int h = 0; h < 2; h++) {
            __m256i wv[8];
#if defined(ISA_AVX2)
            __m256i av[8]; /* Q8_0: |w| (the sign goes to x: vpmaddubsw takes unsigned bytes first) */
#endif
            if (q4)
                for (int g = 0; g < 4; g++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(c + 64 * g + 32 * h));
                    wv[g] = _mm256_and_si256(v, mask);
                    wv[g + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
                }
            else
                for (int g = 0; g < 8; g++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(c + 64 * g + 32 * h));
#if defined(ISA_AVXVNNI)
                    wv[g] = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));
#else
                    wv[g] = v, av[g] = _mm256_abs_epi8(v);
#endif
                }
            v8f dh, mh;
            memcpy(&dh, (const float *)&d16 + 8 * h, sizeof dh);
            memcpy(&mh, (const float *)&m16 + 8 * h, sizeof mh);
            for (int r = 0; r < R; r++) {
                const int8_t *xq = xrow(x, r0 + r, b);
                const size_t i = xidx(x, r0 + r, b);
                __m256i is;
#if defined(ISA_AVXVNNI)
                is = _mm256_setzero_si256();
                for (int g = 0; g < 8; g++) is = _mm256_dpbusd_avx_epi32(is, wv[g], _mm256_set1_epi32(load4(xq + 4 * g)));
                if (!q4) is = _mm256_sub_epi32(is, _mm256_set1_epi32(128 * x->sum[i]));
#else
                if (q4) { /* pairs: |q0 x0 + q1 x1| <= 2 * 15 * 127 = 3810; 8 such sums fit int16 */
                    __m256i s16 = _mm256_setzero_si256();
                    for (int g = 0; g < 8; g++)
                        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wv[g], _mm256_set1_epi32(load4(xq + 4 * g))));
                    is = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
                } else { /* the sign trick: |w| * (x with w's sign); pairs <= 2 * 127 * 127, no saturation */
                    is = _mm256_setzero_si256();
                    for (int g = 0; g < 8; g++) {
                        const __m256i xb = _mm256_set1_epi32(load4(xq + 4 * g));
                        is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(av[g], _mm256_sign_epi8(xb, wv[g])),
                                                                    _mm256_set1_epi16(1)));
                    }
                }
#endif
                v8i isum;
                memcpy(&isum, &is, sizeof isum);
                EPILOGUE(acc[h][r], __builtin_convertvector(isum, v8f), dh, mh, x->dx[i], x->s[i], q4);
            }
        }
    }
    v16f out[RT];
    for (int r = 0; r < R; r++) {
        memcpy((float *)&out[r], &acc[0][r], sizeof(v8f));
        memcpy((float *)&out[r] + 8, &acc[1][r], sizeof(v8f));
    }
    const int n0 = tile * TILE;
    store_rows(out, R, y, ldy, r0, n0, w->n - n0 < TILE ? w->n - n0 : TILE, add);
}

#else /* portable C */

static inline __attribute__((always_inline)) void tile_rows(const pq_t *w, const int q4, int tile, const qx_t *x,
                                                            int r0, const int R, float *y, int ldy, int add) {
    v16f acc[RT];
    for (int r = 0; r < R; r++) acc[r] = (v16f){0};
    const size_t chunk = q4 ? Q4_CHUNK : Q8_CHUNK;
    for (int b = 0; b < w->blocks; b++) {
        const uint8_t *c = w->data + ((size_t)tile * w->blocks + b) * chunk;
        int8_t wq[TILE][32]; /* wq[j][e]: element e of column j, decoded once for the R rows */
        for (int g = 0; g < (q4 ? 4 : 8); g++)
            for (int j = 0; j < TILE; j++)
                for (int e = 0; e < 4; e++) {
                    const uint8_t byte = c[64 * g + 4 * j + e];
                    if (q4) wq[j][4 * g + e] = (int8_t)(byte & 15), wq[j][16 + 4 * g + e] = (int8_t)(byte >> 4);
                    else wq[j][4 * g + e] = (int8_t)byte;
                }
        const v16f d = load_half16(c + (q4 ? 256 : 512));
        const v16f m = q4 ? load_half16(c + 256 + 32) : (v16f){0};
        for (int r = 0; r < R; r++) {
            const int8_t *xq = xrow(x, r0 + r, b);
            const size_t i = xidx(x, r0 + r, b);
            v16i isum;
            for (int j = 0; j < TILE; j++) {
                int32_t s = 0;
                for (int e = 0; e < 32; e++) s += (int32_t)wq[j][e] * (int32_t)xq[e];
                isum[j] = s;
            }
            EPILOGUE(acc[r], __builtin_convertvector(isum, v16f), d, m, x->dx[i], x->s[i], q4);
        }
    }
    const int n0 = tile * TILE;
    store_rows(acc, R, y, ldy, r0, n0, w->n - n0 < TILE ? w->n - n0 : TILE, add);
}

#endif

/* One constant-R copy of tile_rows per R in 1 .. RT. */
#define TILE_CASE(Q4, N)                                                                               \
    case N: tile_rows(w, Q4, tile, x, r0, N, y, ldy, add); break;
_Static_assert(RT == 8, "TILE_CASES spells out the row counts 1 .. RT");
#define TILE_CASES(Q4)                                                                                 \
    switch (R) {                                                                                       \
        TILE_CASE(Q4, 1) TILE_CASE(Q4, 2) TILE_CASE(Q4, 3) TILE_CASE(Q4, 4) TILE_CASE(Q4, 5)          \
        TILE_CASE(Q4, 6) TILE_CASE(Q4, 7) default: tile_rows(w, Q4, tile, x, r0, 8, y, ldy, add); break; \
    }

/* All rows of one tile, in passes of at most RT rows split evenly (so no pass is much shorter). */
static void tile_q4(const pq_t *w, int tile, const qx_t *x, int rows, float *y, int ldy, int add) {
    const int passes = (rows + RT - 1) / RT;
    for (int p = 0, r0 = 0; p < passes; p++) {
        const int R = (rows - r0) / (passes - p);
        TILE_CASES(1)
        r0 += R;
    }
}

static void tile_q8(const pq_t *w, int tile, const qx_t *x, int rows, float *y, int ldy, int add) {
    const int passes = (rows + RT - 1) / RT;
    for (int p = 0, r0 = 0; p < passes; p++) {
        const int R = (rows - r0) / (passes - p);
        TILE_CASES(0)
        r0 += R;
    }
}

/* --- AMX tiles ------------------------------------------------------------------------------ */

#if defined(ISA_AVX512VNNI) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#define HAVE_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Calls of fewer rows use the register tiles: each TDPBSSD, its two tile loads and its 1 KB store cost
 * about as much whatever the rows (about 10 ns a block of 16 columns), and the epilogue, the same on
 * both paths (6 vector operations per row on Q4_1, 4 on Q8_0), bounds both. Measured on a 2-core Xeon
 * with AMX-INT8, one thread, matmuls alone: Q8_0 (the head) gains from 8 rows (16 rows: 1.3x the register
 * tiles, 33 rows: 1.3x), Q4_1 (its codes unpacked to int8 first) loses at 8 and gains 2-4 % from 12. */
#define AMX_MIN_ROWS_Q8 8
#define AMX_MIN_ROWS_Q4 12

static int amx_granted = 0; /* the CPU has AMX-INT8 and Linux gave this process the tile state */
static atomic_int amx_wanted = 1;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return; /* no leaf 7 */
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return;   /* AMX-TILE, AMX-INT8 */
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): without it the first tile
     * instruction dies with SIGILL */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return;
    amx_granted = 1;
}

/* 0: AMX off; 1: on for calls of AMX_MIN_ROWS_* rows and more; 2: on for every call of 2 rows or more */
static int amx_usable(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_granted ? atomic_load_explicit(&amx_wanted, memory_order_relaxed) : 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) tilecfg_t;

/* Tiles 0, 1: C (M rows of 16 int32); 2, 3: A (M rows of one block's 32 int8); 4, 5: B (one block of
 * 16 columns: 8 rows of 4 inputs x 16 columns, the repacked layout as it is). Pairs alternate between
 * even and odd blocks. */
static void amx_config(int M) {
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
#if SPECDEC_Q8_FAULT == 3
    M = M > 8 ? 8 : M; /* misconfigured: rows 8 .. 15 of a pass are never computed */
#endif
    for (int t = 0; t < 2; t++) {
        cfg.rows[t] = (uint8_t)M, cfg.colsb[t] = 64;
        cfg.rows[2 + t] = (uint8_t)M, cfg.colsb[2 + t] = 32;
        cfg.rows[4 + t] = 8, cfg.colsb[4 + t] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* Q4_1 codes unpacked to int8 in B's layout: row g (inputs 4g .. 4g+3 of the 16 columns) is the low
 * nibbles of the packed row g (g < 4) or the high nibbles of row g - 4. */
static inline __attribute__((always_inline)) void unpack_q4(const uint8_t *c, uint8_t *out) {
    const __m512i mask = _mm512_set1_epi8(15);
    for (int g = 0; g < 4; g++) {
        const __m512i v = _mm512_loadu_si512((const void *)(c + 64 * g));
        _mm512_store_si512((void *)(out + 64 * g), _mm512_and_si512(v, mask));
        _mm512_store_si512((void *)(out + 64 * (g + 4)), _mm512_and_si512(_mm512_srli_epi16(v, 4), mask));
    }
}

/* A ring of AMX_RING slots of int32 sums (16 rows of 16 int32 each), AMX_LAG blocks ahead of the epilogue,
 * small enough to stay in L1 (a store of sums that misses L1 costs as much as the epilogue). */
#define AMX_LAG 4
#define AMX_RING 8
#define AMX_AHEAD 4 /* blocks of Q8_0 codes prefetched ahead of their tile load */
/* Largest number of blocks (inputs / 32) the AMX path takes (a tile's unpacked codes are on the stack). */
#define AMX_MAX_BLOCKS 64
_Static_assert(AMX_RING >= AMX_LAG + 2 && (AMX_RING & (AMX_RING - 1)) == 0, "ring size");

/* Block b of a pass: B (its codes: Q4_1 unpacked per tile first, Q8_0 as repacked), A (rows
 * r0 .. r0 + M - 1 of its activations), C = A B, stored in the ring. Even blocks use tiles 0 (C),
 * 2 (A), 4 (B), odd ones 1, 3, 5. */
#define AMX_BLOCK(T, TA, TB, bsrc, arow, cdst)                                                         \
    do {                                                                                               \
        _tile_loadd(TB, bsrc, 64);                                                                     \
        _tile_loadd(TA, arow, x->k);                                                                   \
        _tile_zero(T);                                                                                 \
        _tile_dpbssd(T, TA, TB);                                                                       \
        _tile_stored(T, cdst, 64);                                                                     \
    } while (0)

static inline __attribute__((always_inline)) void amx_sums(const uint8_t *bsrc, const qx_t *x, int r0, int b,
                                                           int32_t (*cring)[256]) {
    const int8_t *arow = x->q + (size_t)r0 * x->k + 32 * (size_t)b;
    if (b & 1) AMX_BLOCK(1, 3, 5, bsrc, arow, cring[b & (AMX_RING - 1)]);
    else AMX_BLOCK(0, 2, 4, bsrc, arow, cring[b & (AMX_RING - 1)]);
}

/* Rows r0 .. r0 + R - 1 of one tile (R <= M, the configured height): block b's sums are computed
 * AMX_LAG blocks ahead of its epilogue, so that the tile unit may run ahead of the vector unit (on the
 * Xeon measured, tile loads and stores and the epilogue's loads barely overlap: their times add); the
 * epilogue runs block by block in order, the R accumulators in registers. */
static inline __attribute__((always_inline)) void amx_pass(const pq_t *w, const int q4, int tile, const qx_t *x,
                                                           int r0, const int R, float *y, int ldy, int add,
                                                           const uint8_t *wq) {
    int32_t cring[AMX_RING][256] __attribute__((aligned(64)));
    const size_t chunk = q4 ? Q4_CHUNK : Q8_CHUNK;
    const uint8_t *base = w->data + (size_t)tile * w->blocks * chunk;
    const int blocks = w->blocks;
#define AMX_B(b) (q4 ? wq + 512 * (size_t)(b) : base + (size_t)(b) * chunk)
    v16f acc[16];
    for (int r = 0; r < R; r++) acc[r] = (v16f){0};
    for (int b = 0; b < AMX_LAG && b < blocks; b++) amx_sums(AMX_B(b), x, r0, b, cring);
    for (int b = 0; b < blocks; b++) {
        if (b + AMX_LAG < blocks) amx_sums(AMX_B(b + AMX_LAG), x, r0, b + AMX_LAG, cring);
        if (!q4 && b + AMX_LAG + AMX_AHEAD < blocks) /* tile loads wait for memory: ask for the codes early */
            for (size_t off = 0; off < Q8_CHUNK; off += 64)
                _mm_prefetch((const char *)base + (b + AMX_LAG + AMX_AHEAD) * chunk + off, _MM_HINT_T0);
        const uint8_t *c = base + b * chunk;
        const v16f d = load_half16(c + (q4 ? 256 : 512));
        const v16f m = q4 ? load_half16(c + 256 + 32) : (v16f){0};
        const int32_t *cs = cring[b & (AMX_RING - 1)];
        for (int r = 0; r < R; r++) {
            const size_t i = xidx(x, r0 + r, b);
            v16i isum;
            memcpy(&isum, cs + 16 * r, sizeof isum);
            EPILOGUE(acc[r], __builtin_convertvector(isum, v16f), d, m, x->dx[i], x->s[i], q4);
        }
    }
    const int n0 = tile * TILE;
    store_rows(acc, R, y, ldy, r0, n0, w->n - n0 < TILE ? w->n - n0 : TILE, add);
}

#define AMX_CASE(Q4, N) case N: amx_pass(w, Q4, tile, x, r0, N, y, ldy, add, wq); break;
#define AMX_CASES(Q4)                                                                                  \
    switch (rv) {                                                                                      \
        AMX_CASE(Q4, 1) AMX_CASE(Q4, 2) AMX_CASE(Q4, 3) AMX_CASE(Q4, 4) AMX_CASE(Q4, 5) AMX_CASE(Q4, 6)  \
        AMX_CASE(Q4, 7) AMX_CASE(Q4, 8) AMX_CASE(Q4, 9) AMX_CASE(Q4, 10) AMX_CASE(Q4, 11)               \
        AMX_CASE(Q4, 12) AMX_CASE(Q4, 13) AMX_CASE(Q4, 14) AMX_CASE(Q4, 15)                             \
    default: AMX_CASE(Q4, 16)                                                                          \
    }

/* Every row of tiles t0 .. t1-1 in passes of at most M rows, M the configured height (the activations'
 * buffer holds whole passes of M rows: qx_rows). */
static void amx_tiles(const pq_t *w, int q4, const qx_t *x, int rows, int M, float *y, int ldy, int add, int t0,
                      int t1) {
    uint8_t wq[AMX_MAX_BLOCKS * 512] __attribute__((aligned(64))); /* a tile's Q4_1 codes unpacked */
    for (int tile = t0; tile < t1; tile++) {
        if (q4) /* all of them before the first tile load reads them (a load right behind its stores stalls) */
            for (int b = 0; b < w->blocks; b++)
                unpack_q4(w->data + ((size_t)tile * w->blocks + b) * Q4_CHUNK, wq + 512 * (size_t)b);
        for (int r0 = 0; r0 < rows; r0 += M) {
            const int rv = rows - r0 < M ? rows - r0 : M;
            if (q4) AMX_CASES(1)
            else AMX_CASES(0)
        }
    }
}

#else
#define HAVE_AMX 0
static int amx_usable(void) { return 0; }
#endif

/* The AMX switch (specdec_q8_amx): -1 asks; 0 turns AMX off; 1 on (the default: calls of
 * AMX_MIN_ROWS_* rows and more); 2 on for every call of 2 rows or more (tests: every AMX pass shape).
 * Returns the setting in effect, or AMX_NONE where the build or the machine has no AMX (or Linux
 * refused its tile state). */
#define AMX_NONE (-3)
static int amx_switch(int want) {
#if HAVE_AMX
    pthread_once(&amx_once, amx_probe);
    if (!amx_granted) return AMX_NONE;
    if (want >= 0) atomic_store(&amx_wanted, want);
    return atomic_load(&amx_wanted);
#else
    (void)want;
    return AMX_NONE;
#endif
}

/* --- the matrix product, threaded over whole tiles ------------------------------------------ */

typedef struct {
    const pq_t *w;
    int q4;
    const qx_t *x;
    int rows;
    float *y;
    int ldy, add, amx;
} mm_job_t;

static void mm_part(void *arg, int part, int parts) {
    const mm_job_t *j = arg;
    const int t0 = (int)((int64_t)j->w->tiles * part / parts), t1 = (int)((int64_t)j->w->tiles * (part + 1) / parts);
#if HAVE_AMX
    if (j->amx) { /* passes of M rows as even as 16-row passes allow (17 rows: 9 + 8, not 16 + 1) */
        const int passes = (j->rows + 15) / 16, M = (j->rows + passes - 1) / passes;
        amx_config(M);
        amx_tiles(j->w, j->q4, j->x, j->rows, M, j->y, j->ldy, j->add, t0, t1);
        _tile_release(); /* the tile state back to its initial state: cheap context switches */
        return;
    }
#endif
    for (int t = t0; t < t1; t++) {
        if (j->q4) tile_q4(j->w, t, j->x, j->rows, j->y, j->ldy, j->add);
        else tile_q8(j->w, t, j->x, j->rows, j->y, j->ldy, j->add);
    }
}

/* y (rows x n, leading dimension ldy) (+)= x W^T, whole tiles split between threads; x's buffers hold
 * qx_rows(rows) rows (qx_alloc). */
static void matmul(const pq_t *w, int q4, const qx_t *x, int rows, float *y, int ldy, int add, pool_t *pool) {
#if HAVE_AMX
    const int mode = rows >= 2 && w->blocks <= AMX_MAX_BLOCKS ? amx_usable() : 0;
    const int amx = mode == 2 || (mode == 1 && rows >= (q4 ? AMX_MIN_ROWS_Q4 : AMX_MIN_ROWS_Q8));
#else
    const int amx = 0;
#endif
    mm_job_t job = {w, q4, x, rows, y, ldy, add, amx};
    const int threads = pool ? pool->workers + 1 : 1;
    pool_run(pool, mm_part, &job, threads < w->tiles ? threads : w->tiles);
}

#endif /* SPECDEC_LEANQ8_MATMUL_H */
