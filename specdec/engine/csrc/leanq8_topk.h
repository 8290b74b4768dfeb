/* leanq8_topk.h: included once by leanq8.c after its standalone linear (it uses lin_t, vexp, loadf and
 * specdec_q8_linear). A drafter's top tokens by partial selection, never a sort of its vocabulary. */
#ifndef SPECDEC_LEANQ8_TOPK_H
#define SPECDEC_LEANQ8_TOPK_H

#define TOPK_MAX 64

/* The k (1 <= k <= TOPK_MAX) largest of x[0..n-1], largest first, ties: the smaller index first (the
 * order of a stable sort by -x), into idx and val; and, when lse is not NULL, log sum exp x (the
 * log-softmax's normaliser: x's maximum plus the log of the sum of exp(x - max), summed in blocks of
 * 16 lanes in a fixed order, so the same bits on every call). A block of 16 entries none of which
 * beats the k-th kept one is skipped by one vector comparison. x must be finite. */
static void topk_row(const float *x, int n, int k, int32_t *idx, float *val, float *lse) {
    float v[TOPK_MAX];
    int32_t ix[TOPK_MAX];
    int m = 0;
    for (int i0 = 0; i0 < n; i0 += 16) {
        const int i1 = i0 + 16 < n ? i0 + 16 : n;
        if (m == k && i1 - i0 == 16) {
            const v16i above = loadf(x + i0) > v[k - 1];
            int any = 0;
            for (int l = 0; l < 16; l++) any |= above[l];
            if (!any) continue;
        }
        for (int i = i0; i < i1; i++) {
            const float a = x[i];
            if (m == k && !(a > v[k - 1])) continue; /* a tie keeps the earlier index */
            int j = m < k ? m++ : k - 1;
            for (; j > 0 && a > v[j - 1]; j--) v[j] = v[j - 1], ix[j] = ix[j - 1];
            v[j] = a, ix[j] = i;
        }
    }
    memcpy(idx, ix, sizeof(int32_t) * (size_t)k);
    memcpy(val, v, sizeof(float) * (size_t)k);
    if (lse) {
        const float mx = v[0];
        v16f acc = {0};
        int i = 0;
        for (; i + 16 <= n; i += 16) acc += vexp(loadf(x + i) - mx);
        float tail[16];
        for (int l = 0; l < 16; l++) tail[l] = i + l < n ? x[i + l] - mx : -INFINITY;
        acc += vexp(loadf(tail));
        *lse = mx + logf(hsum(acc));
    }
}

/* The k largest entries of each of the rows x (rows x n) and their values (idx, val: rows x k), and
 * each row's log sum exp when lse is not NULL. Returns OK, ERR_ARGUMENT (nothing written): rows or
 * n < 1, k outside [1, min(n, TOPK_MAX)]. */
int32_t specdec_topk(const float *x, int32_t rows, int32_t n, int32_t k, int32_t *idx, float *val, float *lse) {
    if (!x || !idx || !val || rows < 1 || n < 1 || k < 1 || k > n || k > TOPK_MAX) return ERR_ARGUMENT;
    for (int r = 0; r < rows; r++)
        topk_row(x + (size_t)r * n, n, k, idx + (size_t)r * k, val + (size_t)r * k, lse ? lse + r : NULL);
    return OK;
}

/* specdec_q8_linear then specdec_topk on its rows, in one call (a drafter's head and its top tokens):
 * y (rows x n) may be NULL (the logits are then not kept). Returns OK, ERR_ARGUMENT (nothing
 * written), ERR_MEMORY. */
int32_t specdec_q8_linear_topk(lin_t *l, const float *x, int32_t rows, int32_t k, int32_t *idx, float *val,
                               float *lse, float *y, int32_t threads) {
    if (!l || !x || !idx || !val || rows < 1 || k < 1 || k > l->w.n || k > TOPK_MAX) return ERR_ARGUMENT;
    float *out = y ? y : malloc(sizeof(float) * (size_t)rows * (size_t)l->w.n);
    if (!out) return ERR_MEMORY;
    int32_t status = specdec_q8_linear(l, x, rows, out, threads);
    if (status == OK) status = specdec_topk(out, rows, l->w.n, k, idx, val, lse);
    if (!y) free(out);
    return status;
}

#endif
