/* leanq8_sample.h: included once by leanq8.c. One draw from a row of weights by inverting its CDF, the
 * rule of specdec.theory.sampling.sample (the first i whose running float64 sum exceeds u times the
 * row's float64 total, both summed in order, as numpy's and torch's cumsum add), without a float64 copy of
 * the row or numpy's accumulate loop (166 us over 49,152 entries warm on a 2-core EPYC, 0.35 ms between
 * two forwards), and since ABI 13 without the rule's two sequential sums wherever a blocked sum's
 * crossing clears the margin below (dev timing on a 2-core EPYC Zen 4, 49,152 entries, warm: ~12 us a
 * draw against ~70-90 us for the two sequential sums).
 *
 * Why the fast path gives the same index. Write S_k for the exact (real) sum of x[0..k], s_k for the
 * running float64 sum the rule adds in order and a_k for any other float64 sum of the same terms (here:
 * blocks of SAMPLE_BLOCK entries summed in sixteen interleaved lanes, the blocks' sums then added in
 * order, and the crossing block's entries in order from its prefix). Every term of a sum in any order
 * passes through at most n - 1 roundings, so for non-negative terms each such sum errs by at most
 * g S, S = S_{n-1}, g = (n - 1) 2^-53 / (1 - (n - 1) 2^-53) (Higham, Accuracy and Stability of Numerical
 * Algorithms, 2nd ed., ch. 4): |s_k - a_k| <= 2 g S and, with the rounding of u times either total,
 * |t - t'| <= 2 g S + 2^-52 S between the rule's target t = u s_{n-1} and t' = u a_{n-1}. The margin
 * M = 8 (n + 1) 2^-53 a_{n-1} exceeds the two together (up to a factor 1 + g on the 2^-52 term), with
 * room for rounding t' +- M and M itself, since
 * S <= a_{n-1} / (1 - g) and 4 g S + 2^-52 S < 4 (n + 1) 2^-53 S for the rows taken (n < 2^21). The
 * running sums of non-negative terms never decrease, so if a_{i-1} <= t' - M and a_i > t' + M, then
 * s_{i-1} < t and s_i > t: i is the rule's index (i = 0 too: then x[0] > t' + M > 0; an entry of no mass
 * adds nothing, so it can never clear the margin on both sides). Where the crossing entry does not clear
 * the margin on both sides (a draw within M of a boundary: 8 (n + 1) 2^-53 of the total, 4.4e-11 of it
 * for 49,152 entries), or a term is negative, infinite or NaN, or the row is short, the rule runs as
 * written (the exact path). */
#ifndef SPECDEC_LEANQ8_SAMPLE_H
#define SPECDEC_LEANQ8_SAMPLE_H

#define SAMPLE_BLOCK 256
/* GCC's and Clang's vector extensions: the machine's own vector unit, whatever -march gives (AVX-512,
 * AVX2, SSE2), each lane an independent float64 sum */
typedef double sample_v8d __attribute__((vector_size(64)));
typedef float sample_v8f __attribute__((vector_size(32)));
typedef int32_t sample_v8i __attribute__((vector_size(32)));
#define SAMPLE_MAX_BLOCKS 4096 /* rows up to 1 M entries take the fast path (the block sums on the stack) */

/* The rule as written: the running sum in order, its last value to *total, then the first i with
 * cdf[i] > u * total, recomputing the sum up to i; n when none qualifies. */
static int64_t sample_cdf_exact(const float *x, int64_t n, double u, double *total) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)x[i];
    *total = acc;
    if (!(acc > 0.0)) return n;
    const double target = u * acc;
    double c = 0.0;
    for (int64_t i = 0; i < n; i++) {
        c += (double)x[i];
        if (c > target) return i;
    }
    return n;
}

/* The fast path: the index, or -1 where it cannot decide (then the exact path runs); *total its sum. */
static int64_t sample_cdf_fast(const float *x, int64_t n, double u, double *total) {
    if (!(u >= 0.0 && u < 1.0) || n < 2 * SAMPLE_BLOCK) return -1;
    const int64_t blocks = n / SAMPLE_BLOCK; /* the last block takes the remainder */
    if (blocks > SAMPLE_MAX_BLOCKS) return -1;
    double sums[SAMPLE_MAX_BLOCKS];
    double all = 0.0;
    int ok = 1;
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t lo = b * SAMPLE_BLOCK, hi = b + 1 == blocks ? n : lo + SAMPLE_BLOCK;
        sample_v8d s0 = {0}, s1 = {0}; /* sixteen lanes, each summed in order */
        sample_v8i negative = {0};
        const sample_v8f zero = {0};
        int64_t i = lo;
        for (; i + 16 <= hi; i += 16) {
            sample_v8f v0, v1;
            memcpy(&v0, x + i, sizeof v0);
            memcpy(&v1, x + i + 8, sizeof v1);
            s0 += __builtin_convertvector(v0, sample_v8d);
            s1 += __builtin_convertvector(v1, sample_v8d);
            negative |= (v0 < zero) | (v1 < zero);
        }
        s0 += s1;
        double sum = ((s0[0] + s0[1]) + (s0[2] + s0[3])) + ((s0[4] + s0[5]) + (s0[6] + s0[7]));
        int any_negative = 0;
        for (int j = 0; j < 8; j++) any_negative |= negative[j] != 0;
        for (; i < hi; i++) {
            sum += (double)x[i];
            any_negative |= x[i] < 0.0f;
        }
        sums[b] = sum;
        ok &= !any_negative;
        all += sums[b];
    }
    /* a NaN makes the sum NaN, an infinity infinite; a negative term is flagged */
    if (!ok || !(all > 0.0) || !(all <= 1.0e300)) return -1;
    *total = all;
    const double margin = 8.0 * (double)(n + 1) * 0x1p-53 * all;
    const double target = u * all, below = target - margin, above = target + margin;
    double prefix = 0.0;
    int64_t b = 0;
    while (b + 1 < blocks && prefix + sums[b] <= below) prefix += sums[b++];
    const int64_t lo = b * SAMPLE_BLOCK, hi = b + 1 == blocks ? n : lo + SAMPLE_BLOCK;
    double c = prefix;
    for (int64_t i = lo; i < hi; i++) {
        c += (double)x[i];
        if (c > below) return c > above ? i : -1;
    }
    return -1; /* the block's entries in order did not reach the target less the margin: the rule decides */
}

/* One draw: the first i with cdf[i] > u * total (cdf the running float64 sum of x in order), n when none
 * qualifies (total not > 0, a NaN, or rounding: the caller's guard), or ERR_ARGUMENT (x or total NULL,
 * n < 1). *total: the row's total, positive exactly when the rule's is (the running sum on the exact path,
 * the blocks' sum on the fast one). *path (may be NULL): 0 where the fast path decided, 1 the exact. */
int64_t specdec_sample_cdf(const float *x, int64_t n, double u, double *total, int32_t *path) {
    if (!x || !total || n < 1) return ERR_ARGUMENT;
    const int64_t fast = sample_cdf_fast(x, n, u, total);
    if (path) *path = fast < 0;
    return fast >= 0 ? fast : sample_cdf_exact(x, n, u, total);
}

#endif
