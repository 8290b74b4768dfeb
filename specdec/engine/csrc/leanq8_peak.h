/* The machine's arithmetic peaks as leanq8.c's kernels meet them (specdec_q8_peak): independent chains of
 * the very instructions the matrix products run, on the process's pool, for the verify curve's floor
 * (specdec/measure/verifykernels.py times the call). Included once by leanq8.c after the matmul.
 *
 *   kind 0, int8 multiply-adds: the register tiles' dot product (vpdpbusd on 16 or 8 lanes, vpmaddubsw +
 *           vpmaddwd on AVX2, int32 C loops in the portable build);
 *   kind 1, int8 multiply-adds on AMX: TDPBSSD on 16 x 64 by 64 x 16 tiles (ERR_ARGUMENT without AMX);
 *   kind 2, float32 vector operations (16 lanes each, the unit the exact epilogue is counted in): vmulps
 *           on 16 lanes or its halves, as the build compiles v16f arithmetic.
 */
#ifndef SPECDEC_LEANQ8_PEAK_H
#define SPECDEC_LEANQ8_PEAK_H

typedef struct {
    int kind;
    int64_t iters;
    volatile int32_t sink;
} peak_job_t;

#define PEAK_CHAINS 12
/* The chain's value must be made by the instruction each iteration: an empty asm that may change it (in
 * its vector register) stops the compiler from folding the loop, whose operands are constants. */
#if defined(ISA_AVX512VNNI)
#define PEAK_KEEP(v) ({ __asm__ volatile("" : "+v"(v)); })
#else
#define PEAK_KEEP(v) ({ __asm__ volatile("" : "+x"(v)); })
#endif

/* Twelve named accumulators (an array indexed in a loop would live in memory), each step of each chain
 * kept in its register. */
#define PEAK_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

static void peak_int8(peak_job_t *j) {
    int32_t total = 0;
#if defined(ISA_AVX512VNNI)
    const __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
#define DECL(c) __m512i a##c = _mm512_set1_epi32(c);
#define STEP(c) a##c = _mm512_dpbusd_epi32(a##c, w, x), PEAK_KEEP(a##c);
#define SUM(c) total += _mm512_reduce_add_epi32(a##c);
#elif defined(ISA_AVXVNNI)
    const __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2);
#define DECL(c) __m256i a##c = _mm256_set1_epi32(c);
#define STEP(c) a##c = _mm256_dpbusd_avx_epi32(a##c, w, x), PEAK_KEEP(a##c);
#define SUM(c) total += _mm256_extract_epi32(a##c, 0);
#elif defined(ISA_AVX2)
    const __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
#define DECL(c) __m256i a##c = _mm256_set1_epi32(c);
#define STEP(c) a##c = _mm256_add_epi32(a##c, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), one)), PEAK_KEEP(a##c);
#define SUM(c) total += _mm256_extract_epi32(a##c, 0);
#endif
#if defined(ISA_AVX512VNNI) || defined(ISA_AVXVNNI) || defined(ISA_AVX2)
    PEAK_12(DECL)
    for (int64_t i = 0; i < j->iters; i++) {
        PEAK_12(STEP)
    }
    PEAK_12(SUM)
#undef DECL
#undef STEP
#undef SUM
#else
    int32_t acc[PEAK_CHAINS][16];
    int8_t w[64], x[64];
    for (int e = 0; e < 64; e++) w[e] = (int8_t)(3 + (e & 1)), x[e] = (int8_t)(-2 - (e & 3));
    for (int c = 0; c < PEAK_CHAINS; c++)
        for (int l = 0; l < 16; l++) acc[c][l] = c;
    for (int64_t i = 0; i < j->iters; i++) {
        for (int c = 0; c < PEAK_CHAINS; c++)
            for (int l = 0; l < 16; l++)
                for (int e = 0; e < 4; e++) acc[c][l] += (int32_t)w[4 * l + e] * (int32_t)x[4 * l + e];
        __asm__ volatile("" ::: "memory"); /* no folding of the constant products across iterations */
    }
    for (int c = 0; c < PEAK_CHAINS; c++) total += acc[c][0];
#endif
    j->sink = total;
}

static void peak_float(peak_job_t *j) {
    float total = 0.0f;
#if defined(ISA_AVX512VNNI)
    const __m512 f = _mm512_set1_ps(0.999999f);
#define DECL(c) __m512 a##c = _mm512_set1_ps((float)(c + 1));
#define STEP(c) a##c = _mm512_mul_ps(a##c, f), PEAK_KEEP(a##c);
#define SUM(c) total = total + _mm512_reduce_add_ps(a##c);
#elif defined(ISA_AVXVNNI) || defined(ISA_AVX2)
    const __m256 f = _mm256_set1_ps(0.999999f); /* a 16-lane operation is two of 8 lanes */
#define DECL(c) __m256 a##c = _mm256_set1_ps((float)(c + 1)), b##c = a##c;
#define STEP(c) a##c = _mm256_mul_ps(a##c, f), b##c = _mm256_mul_ps(b##c, f), PEAK_KEEP(a##c), PEAK_KEEP(b##c);
#define SUM(c) total = total + _mm256_cvtss_f32(a##c) + _mm256_cvtss_f32(b##c);
#endif
#if defined(ISA_AVX512VNNI) || defined(ISA_AVXVNNI) || defined(ISA_AVX2)
    PEAK_12(DECL)
    for (int64_t i = 0; i < j->iters; i++) {
        PEAK_12(STEP)
    }
    PEAK_12(SUM)
#undef DECL
#undef STEP
#undef SUM
#else
    v16f acc[PEAK_CHAINS]; /* float products are not reassociated: the loop cannot be folded */
    const v16f f = (v16f){0} + 0.999999f;
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = (v16f){0} + (float)(c + 1);
    for (int64_t i = 0; i < j->iters; i++)
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = acc[c] * f;
    for (int c = 0; c < PEAK_CHAINS; c++) total = total + acc[c][0];
#endif
    j->sink = (int32_t)total;
}

#if HAVE_AMX
static void peak_amx(peak_job_t *j) {
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    int8_t a[16 * 64] __attribute__((aligned(64)));
    int32_t c[16 * 16] __attribute__((aligned(64)));
    for (int e = 0; e < 16 * 64; e++) a[e] = (int8_t)(e % 7 - 3);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    for (int64_t i = 0; i < j->iters; i++) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 5);
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 5);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    j->sink = c[0];
}
#endif

static void peak_part(void *arg, int part, int parts) {
    (void)part, (void)parts;
    peak_job_t *j = arg;
    if (j->kind == 0) peak_int8(j);
    else if (j->kind == 2) peak_float(j);
#if HAVE_AMX
    else peak_amx(j);
#endif
}

/* What one iteration of a kind does on one thread: int8 multiply-adds (kinds 0, 1) or 16-lane float
 * vector operations (kind 2). */
static double peak_per_iteration(int kind) {
    if (kind == 1) return 4.0 * 16 * 16 * 64;
    if (kind == 2) return PEAK_CHAINS;
#if defined(ISA_AVX512VNNI)
    return PEAK_CHAINS * 64.0;
#elif defined(ISA_AVXVNNI) || defined(ISA_AVX2)
    return PEAK_CHAINS * 32.0;
#else
    return PEAK_CHAINS * 64.0;
#endif
}

/* Run `iters` iterations of kind's loop on each of `threads` threads (the process's pool, as a forward
 * runs) and return the work done: int8 multiply-adds (kinds 0 and 1) or 16-lane float vector operations
 * (kind 2); the caller times the call. ERR_ARGUMENT for a bad kind or count, or kind 1 without AMX. */
double specdec_q8_peak(int32_t kind, int64_t iters, int32_t threads) {
    if (kind < 0 || kind > 2 || iters < 1 || threads < 1 || threads > 1024) return ERR_ARGUMENT;
    if (kind == 1 && amx_switch(-1) == AMX_NONE) return ERR_ARGUMENT;
    peak_job_t job = {kind, iters, 0};
    pool_t *pool = pool_take(threads);
    const int parts = pool ? pool->workers + 1 : 1;
    pool_run(pool, peak_part, &job, parts);
    pool_give(threads);
    return (double)iters * parts * peak_per_iteration(kind);
}

#endif /* SPECDEC_LEANQ8_PEAK_H */
