/* leanq8_sample.h: included once by leanq8.c. One draw from a row of weights by inverting its CDF, the
 * rule of specdec.theory.sampling.sample, without a float64 copy of the row or numpy's accumulate loop
 * (166 us over 49,152 entries warm on a 2-core EPYC, 0.35 ms between two forwards). */
#ifndef SPECDEC_LEANQ8_SAMPLE_H
#define SPECDEC_LEANQ8_SAMPLE_H

/* The running sum of x[0..n-1] in double, added in order (numpy's cumsum of the row as float64 and
 * torch's, bit for bit: the same additions in the same order; no reassociation without -ffast-math),
 * its last value to *total; then the first i with cdf[i] > u * total, recomputing the sum up to i. Returns
 * that i, n when none qualifies (total not > 0, a NaN, or rounding: the caller's guard), or ERR_ARGUMENT
 * (x or total NULL, n < 1). */
int64_t specdec_sample_cdf(const float *x, int64_t n, double u, double *total) {
    if (!x || !total || n < 1) return ERR_ARGUMENT;
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

#endif
