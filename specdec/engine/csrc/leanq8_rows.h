/* leanq8.c's row-wise work between two matrix products (static functions: included by leanq8.c only,
 * after rms, silu_mul, quantize_row and the pool). Part of the build key like every header beside the
 * sources (specdec/engine/native.py). */
#ifndef SPECDEC_LEANQ8_ROWS_H
#define SPECDEC_LEANQ8_ROWS_H

/* The row-wise work between two matrix products, split over the pool by rows (each row's arithmetic
 * is the same whichever thread does it): an RMS norm, SiLU(gate) up, or nothing, then the row's
 * activations quantized for the next product. */
enum { ROWS_NORM, ROWS_PLAIN, ROWS_SILU };

/* Calls of fewer rows run this work on the calling thread (a handful of microseconds per row). */
#define ROWS_MIN_PARALLEL 4

typedef struct {
    int mode;
    const float *in; /* rows of width `width` (ROWS_SILU: gate then up, 2 I) */
    int width, rows;
    const float *norm;
    float eps;
    float *tmp; /* ROWS_NORM / ROWS_SILU: the rows before quantizing, of width qx->k */
    qx_t *qx;
} rows_job_t;

static void rows_part(void *arg, int part, int parts) {
    const rows_job_t *j = arg;
    const int r0 = (int)((int64_t)j->rows * part / parts), r1 = (int)((int64_t)j->rows * (part + 1) / parts);
    const int k = j->qx->k, nb = j->qx->blocks;
    for (int r = r0; r < r1; r++) {
        const float *src = j->in + (size_t)r * j->width;
        if (j->mode == ROWS_NORM) rms(src, j->norm, j->width, j->eps, j->tmp + (size_t)r * k), src = j->tmp + (size_t)r * k;
        else if (j->mode == ROWS_SILU) silu_mul(src, src + k, k, j->tmp + (size_t)r * k), src = j->tmp + (size_t)r * k;
        quantize_row(src, k, j->qx->q + (size_t)r * k, j->qx->dx + (size_t)r * nb, j->qx->s + (size_t)r * nb,
                     j->qx->sum + (size_t)r * nb);
    }
}

/* rows rows of `in` through `mode` into tmp (of width k) and quantized into qx. */
static void rows_then_quantize(int mode, const float *in, int width, int rows, int k, const float *norm, float eps,
                               float *tmp, qx_t *qx, pool_t *pool) {
    qx->k = k, qx->blocks = k / 32;
    rows_job_t job = {mode, in, width, rows, norm, eps, tmp, qx};
    const int threads = pool ? pool->workers + 1 : 1;
    pool_run(pool, rows_part, &job, rows < ROWS_MIN_PARALLEL ? 1 : (threads < rows ? threads : rows));
}

#endif /* SPECDEC_LEANQ8_ROWS_H */
