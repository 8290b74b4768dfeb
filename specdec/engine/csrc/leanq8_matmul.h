/* leanq8.c's int8 matrix products, included once by it after the repacked weights' types (pq_t) and the
 * thread pool: activations quantized to int8 per block of 32 (quantize_row, quantize), weights decoded
 * from their repacked tiles (decode_q4, decode_q8), the integer dot products (vpdpbusd where the CPU has
 * it; the same integer sums on every path), and the float epilogue and threaded tiles of matmul. Part of
 * the build key like every header beside the sources (specdec/engine/native.py).
 */
#ifndef SPECDEC_LEANQ8_MATMUL_H
#define SPECDEC_LEANQ8_MATMUL_H

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

/* A row's activations quantized per block of 32 (Q8_1): q, dx, s = dx * sum(q), and sum(q). */
typedef struct {
    int8_t *q;
    float *dx, *s;
    int32_t *sum;
    int k, blocks;
} qx_t;

/* Rounding to the nearest integer, ties to even, by adding and subtracting 1.5 * 2^23: plain IEEE
 * additions (valid for |v| < 2^22; here |v| <= 127), so every path rounds alike. */
static const float ROUND_MAGIC = 12582912.0f;

static inline v16i vclamp(v16i v, v16i lim) {
    const v16i hi = v > lim, lo = v < -lim;
    v = (v & ~hi) | (lim & hi);
    return (v & ~lo) | (-lim & lo);
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
        int32_t top = 0;
        for (int i = 0; i < 16; i++) top = mx[i] > top ? mx[i] : top;
        float amax;
        memcpy(&amax, &top, sizeof amax);
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        const v16f rl = (lo * id + ROUND_MAGIC) - ROUND_MAGIC, rh = (hi * id + ROUND_MAGIC) - ROUND_MAGIC;
        v16i ql = __builtin_convertvector(rl, v16i), qh = __builtin_convertvector(rh, v16i);
        const v16i lim = (v16i){0} + 127;
        ql = vclamp(ql, lim), qh = vclamp(qh, lim);
        int32_t total = 0;
        for (int i = 0; i < 16; i++) {
            q[32 * b + i] = (int8_t)ql[i];
            q[32 * b + 16 + i] = (int8_t)qh[i];
            total += ql[i] + qh[i];
        }
        dx[b] = d, sum[b] = total, s[b] = d * (float)total;
    }
}

/* --- integer dot products: one block of 32 inputs, 16 output columns, one row --------------- */

/* The decoded weights of one (tile, block), in the form each path wants. */
typedef struct {
#if defined(ISA_AVX512VNNI)
    __m512i w[8];
#elif defined(ISA_AVXVNNI) || defined(ISA_AVX2)
    __m256i w[8][2]; /* lanes 0..7 and 8..15 */
    __m256i a[8][2]; /* AVX2 head: |w| */
#else
    int8_t w[TILE][32]; /* w[j][e]: element e of column j */
#endif
} tilew_t;

static inline __attribute__((always_inline)) void decode_q4(const uint8_t *c, tilew_t *t) {
#if defined(ISA_AVX512VNNI)
    const __m512i mask = _mm512_set1_epi8(15);
    for (int g = 0; g < 4; g++) {
        const __m512i v = _mm512_loadu_si512((const void *)(c + 64 * g));
        t->w[g] = _mm512_and_si512(v, mask);
        t->w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
    }
#elif defined(ISA_AVXVNNI) || defined(ISA_AVX2)
    const __m256i mask = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; g++)
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(c + 64 * g + 32 * h));
            t->w[g][h] = _mm256_and_si256(v, mask);
            t->w[g + 4][h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        }
#else
    for (int g = 0; g < 4; g++)
        for (int j = 0; j < TILE; j++)
            for (int e = 0; e < 4; e++) {
                const uint8_t byte = c[64 * g + 4 * j + e];
                t->w[j][4 * g + e] = (int8_t)(byte & 15);
                t->w[j][16 + 4 * g + e] = (int8_t)(byte >> 4);
            }
#endif
}

static inline __attribute__((always_inline)) void decode_q8(const uint8_t *c, tilew_t *t) {
#if defined(ISA_AVX512VNNI)
    const __m512i flip = _mm512_set1_epi8((char)0x80); /* u8 = w + 128 */
    for (int g = 0; g < 8; g++) t->w[g] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(c + 64 * g)), flip);
#elif defined(ISA_AVXVNNI)
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int g = 0; g < 8; g++)
        for (int h = 0; h < 2; h++)
            t->w[g][h] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(c + 64 * g + 32 * h)), flip);
#elif defined(ISA_AVX2)
    for (int g = 0; g < 8; g++)
        for (int h = 0; h < 2; h++) {
            t->w[g][h] = _mm256_loadu_si256((const __m256i *)(c + 64 * g + 32 * h)); /* signed w */
            t->a[g][h] = _mm256_abs_epi8(t->w[g][h]);
        }
#else
    for (int g = 0; g < 8; g++)
        for (int j = 0; j < TILE; j++)
            for (int e = 0; e < 4; e++) t->w[j][4 * g + e] = (int8_t)c[64 * g + 4 * j + e];
#endif
}

static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* isum[j] = sum_e w[j][e] xq[e] for the 4-bit codes (0..15). */
static inline __attribute__((always_inline)) v16i dot_q4(const tilew_t *t, const int8_t *xq) {
    v16i out;
#if defined(ISA_AVX512VNNI)
    __m512i acc = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++) acc = _mm512_dpbusd_epi32(acc, t->w[g], _mm512_set1_epi32(load4(xq + 4 * g)));
    memcpy(&out, &acc, sizeof out);
#elif defined(ISA_AVXVNNI)
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int g = 0; g < 8; g++) {
        const __m256i x = _mm256_set1_epi32(load4(xq + 4 * g));
        for (int h = 0; h < 2; h++) acc[h] = _mm256_dpbusd_avx_epi32(acc[h], t->w[g][h], x);
    }
    memcpy(&out, acc, sizeof out);
#elif defined(ISA_AVX2)
    /* vpmaddubsw pairs: |q0 x0 + q1 x1| <= 2 * 15 * 127 = 3810, and 8 such sums <= 30480 fit int16 */
    __m256i acc[2];
    for (int h = 0; h < 2; h++) {
        __m256i s16 = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++)
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(t->w[g][h], _mm256_set1_epi32(load4(xq + 4 * g))));
        acc[h] = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    }
    memcpy(&out, acc, sizeof out);
#else
    for (int j = 0; j < TILE; j++) {
        int32_t s = 0;
        for (int e = 0; e < 32; e++) s += (int32_t)t->w[j][e] * (int32_t)xq[e];
        out[j] = s;
    }
#endif
    return out;
}

/* isum[j] = sum_e w[j][e] xq[e] for the 8-bit codes (-127..127); xsum = sum_e xq[e]. */
static inline __attribute__((always_inline)) v16i dot_q8(const tilew_t *t, const int8_t *xq, int32_t xsum) {
    v16i out;
#if defined(ISA_AVX512VNNI)
    __m512i acc = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++) acc = _mm512_dpbusd_epi32(acc, t->w[g], _mm512_set1_epi32(load4(xq + 4 * g)));
    acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(128 * xsum)); /* (w + 128) x - 128 x */
    memcpy(&out, &acc, sizeof out);
#elif defined(ISA_AVXVNNI)
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int g = 0; g < 8; g++) {
        const __m256i x = _mm256_set1_epi32(load4(xq + 4 * g));
        for (int h = 0; h < 2; h++) acc[h] = _mm256_dpbusd_avx_epi32(acc[h], t->w[g][h], x);
    }
    for (int h = 0; h < 2; h++) acc[h] = _mm256_sub_epi32(acc[h], _mm256_set1_epi32(128 * xsum));
    memcpy(&out, acc, sizeof out);
#elif defined(ISA_AVX2)
    /* the sign trick: |w| * (x with w's sign); pairs <= 2 * 127 * 127 = 32258, no saturation */
    (void)xsum;
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    const __m256i one = _mm256_set1_epi16(1);
    for (int g = 0; g < 8; g++) {
        const __m256i x = _mm256_set1_epi32(load4(xq + 4 * g));
        for (int h = 0; h < 2; h++)
            acc[h] = _mm256_add_epi32(
                acc[h], _mm256_madd_epi16(_mm256_maddubs_epi16(t->a[g][h], _mm256_sign_epi8(x, t->w[g][h])), one));
    }
    memcpy(&out, acc, sizeof out);
#else
    (void)xsum;
    for (int j = 0; j < TILE; j++) {
        int32_t s = 0;
        for (int e = 0; e < 32; e++) s += (int32_t)t->w[j][e] * (int32_t)xq[e];
        out[j] = s;
    }
#endif
    return out;
}

/* --- the matrix products: the float epilogue is the same code on every path ------------------ */

/* rows per pass over a tile: 5 keeps the accumulators and decoded weights in registers (at 6 and
 * more GCC spilled them on AVX-512, and a call over 6 rows cost far more than one over 5) */
#define RCHUNK 5
_Static_assert(RCHUNK == 5, "TILE_CASES spells out the row counts 1 .. RCHUNK");

/* Rows r0 .. r0+R-1 of one tile: y[r][n] (+)= sum over blocks, in block order, of
 * ((d dx) isum + m s) (Q4_1) or (d dx) isum (Q8_0). */
static inline __attribute__((always_inline)) void tile_rows(const pq_t *w, int q4, int tile, const qx_t *x,
                                                            int r0, int R, float *y, int ldy, int add) {
    v16f acc[RCHUNK];
    for (int r = 0; r < R; r++) acc[r] = (v16f){0};
    const size_t chunk = q4 ? Q4_CHUNK : Q8_CHUNK;
    for (int b = 0; b < w->blocks; b++) {
        const uint8_t *c = w->data + ((size_t)tile * w->blocks + b) * chunk;
        tilew_t t;
        if (q4) decode_q4(c, &t);
        else decode_q8(c, &t);
        const v16f d = load_half16(c + (q4 ? 256 : 512));
        const v16f m = q4 ? load_half16(c + 256 + 32) : (v16f){0};
        for (int r = 0; r < R; r++) {
            const size_t i = (size_t)(r0 + r) * x->blocks + b;
            const int8_t *xq = x->q + i * 32;
            const v16i isum = q4 ? dot_q4(&t, xq) : dot_q8(&t, xq, x->sum[i]);
            const v16f scale = d * x->dx[i];
            acc[r] = acc[r] + scale * __builtin_convertvector(isum, v16f);
            if (q4) acc[r] = acc[r] + m * x->s[i];
        }
    }
    const int n0 = tile * TILE, nn = w->n - n0 < TILE ? w->n - n0 : TILE;
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

/* R is 1 .. RCHUNK (5): one constant-R copy of tile_rows each (no case past RCHUNK, whose
 * accumulators would lie outside acc[RCHUNK]). */
#define TILE_CASES(Q4)                                                                                 \
    switch (R) {                                                                                       \
    case 1: tile_rows(w, Q4, tile, x, r0, 1, y, ldy, add); break;                                      \
    case 2: tile_rows(w, Q4, tile, x, r0, 2, y, ldy, add); break;                                      \
    case 3: tile_rows(w, Q4, tile, x, r0, 3, y, ldy, add); break;                                      \
    case 4: tile_rows(w, Q4, tile, x, r0, 4, y, ldy, add); break;                                      \
    default: tile_rows(w, Q4, tile, x, r0, RCHUNK, y, ldy, add); break;                                \
    }

static void tile_q4(const pq_t *w, int tile, const qx_t *x, int rows, float *y, int ldy, int add) {
    for (int r0 = 0; r0 < rows; r0 += RCHUNK) {
        const int R = rows - r0 < RCHUNK ? rows - r0 : RCHUNK;
        TILE_CASES(1)
    }
}

static void tile_q8(const pq_t *w, int tile, const qx_t *x, int rows, float *y, int ldy, int add) {
    for (int r0 = 0; r0 < rows; r0 += RCHUNK) {
        const int R = rows - r0 < RCHUNK ? rows - r0 : RCHUNK;
        TILE_CASES(0)
    }
}

typedef struct {
    const pq_t *w;
    int q4;
    const qx_t *x;
    int rows;
    float *y;
    int ldy, add;
} mm_job_t;

static void mm_part(void *arg, int part, int parts) {
    const mm_job_t *j = arg;
    const int t0 = (int)((int64_t)j->w->tiles * part / parts), t1 = (int)((int64_t)j->w->tiles * (part + 1) / parts);
    for (int t = t0; t < t1; t++) {
        if (j->q4) tile_q4(j->w, t, j->x, j->rows, j->y, j->ldy, j->add);
        else tile_q8(j->w, t, j->x, j->rows, j->y, j->ldy, j->add);
    }
}

/* y (rows x n, leading dimension ldy) (+)= x W^T, whole tiles split between threads. */
static void matmul(const pq_t *w, int q4, const qx_t *x, int rows, float *y, int ldy, int add, pool_t *pool) {
    mm_job_t job = {w, q4, x, rows, y, ldy, add};
    const int threads = pool ? pool->workers + 1 : 1;
    pool_run(pool, mm_part, &job, threads < w->tiles ? threads : w->tiles);
}

static void quantize(const float *x, int rows, int k, qx_t *out) {
    out->k = k, out->blocks = k / 32;
    for (int r = 0; r < rows; r++)
        quantize_row(x + (size_t)r * k, k, out->q + (size_t)r * k, out->dx + (size_t)r * out->blocks,
                     out->s + (size_t)r * out->blocks, out->sum + (size_t)r * out->blocks);
}

#endif /* SPECDEC_LEANQ8_MATMUL_H */
