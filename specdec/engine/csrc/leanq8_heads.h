/* leanq8_heads.h: included once by leanq8.c after leanq8_eagle.h (it uses lin_t, rms, specdec_q8_linear and
 * specdec_q8_linear_topk). Medusa's heads and an MLP speculator's stage, each with the kept head's top
 * tokens, in one call: no Python between a drafter's matrices. */
#ifndef SPECDEC_LEANQ8_HEADS_H
#define SPECDEC_LEANQ8_HEADS_H

static int finite_rows(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Medusa-1's draft: u = rms(feat) * norm_w (hidden), z = w u + bias (heads x hidden, w a linear of
 * (heads hidden, hidden)), r_k = u + z_k * sigmoid(z_k), and the top `top` entries of head's logits of
 * each r_k with each row's log sum exp (idx, val: heads x top; lse: heads), as specdec_q8_linear_topk
 * gives them. Returns OK, ERR_ARGUMENT (nothing written: a NULL pointer, shapes that do not fit, eps not
 * > 0, top outside [1, min(TOPK_MAX, head's rows)], a feature not finite), ERR_MEMORY. */
int32_t specdec_q8_medusa(lin_t *w, const float *bias, lin_t *head, const float *norm_w, float eps, const float *feat,
                          int32_t heads, int32_t top, int32_t *idx, float *val, float *lse, int32_t threads) {
    if (!w || !bias || !head || !norm_w || !feat || !idx || !val || !lse) return ERR_ARGUMENT;
    const int H = head->w.k;
    if (heads < 1 || heads > 1024 || w->w.k != H || (int64_t)w->w.n != (int64_t)heads * H || !(eps > 0.0f) || top < 1 ||
        top > TOPK_MAX || top > head->w.n || threads < 1 || threads > 1024 || !finite_rows(feat, (size_t)H))
        return ERR_ARGUMENT;
    float *u = malloc(sizeof(float) * (size_t)H), *z = malloc(sizeof(float) * (size_t)heads * H);
    float *r = malloc(sizeof(float) * (size_t)heads * H);
    int32_t status = u && z && r ? OK : ERR_MEMORY;
    if (status == OK) {
        rms(feat, norm_w, H, eps, u);
        status = specdec_q8_linear(w, u, 1, z, threads);
    }
    if (status == OK) {
        for (int k = 0; k < heads; k++)
            for (int i = 0; i < H; i++) {
                const float a = z[(size_t)k * H + i] + bias[(size_t)k * H + i];
                r[(size_t)k * H + i] = u[i] + a / (1.0f + expf(-a));
            }
        status = specdec_q8_linear_topk(head, r, heads, top, idx, val, lse, NULL, threads);
    }
    free(u), free(z), free(r);
    return status;
}

/* One stage of an MLP speculator over `rows` rows: each state (rms(state) * norm_w first when norm_w is
 * not NULL: the first stage reads the target's normalized feature) beside the embedding of the token it
 * consumes, z = w [state, embed[id]] (w: (hidden, 2 hidden), the stage's two weights scaled into it),
 * s = gelu_tanh(layer_norm(z) * ln_w + ln_b) into states_out (rows x hidden), and the top `top` entries
 * of head's logits of s * out_scale with each row's log sum exp (idx, val: rows x top; lse: rows).
 * Returns OK, ERR_ARGUMENT (nothing written), ERR_MEMORY. */
int32_t specdec_q8_mlp_stage(lin_t *w, const float *ln_w, const float *ln_b, const float *out_scale, lin_t *head,
                             const float *norm_w, float eps, const float *states, const float *embed, int32_t vocab,
                             const int64_t *ids, int32_t rows, int32_t top, float *states_out, int32_t *idx,
                             float *val, float *lse, int32_t threads) {
    if (!w || !ln_w || !ln_b || !out_scale || !head || !states || !embed || !ids || !states_out || !idx || !val ||
        !lse)
        return ERR_ARGUMENT;
    const int H = head->w.k;
    if (rows < 1 || (int64_t)w->w.k != 2 * (int64_t)H || w->w.n != H || (norm_w && !(eps > 0.0f)) || vocab < 1 || top < 1 ||
        top > TOPK_MAX || top > head->w.n || threads < 1 || threads > 1024 ||
        !finite_rows(states, (size_t)rows * H))
        return ERR_ARGUMENT;
    for (int r = 0; r < rows; r++)
        if (ids[r] < 0 || ids[r] >= vocab) return ERR_ARGUMENT;
    float *x2 = malloc(sizeof(float) * (size_t)rows * 2 * H), *z = malloc(sizeof(float) * (size_t)rows * H);
    float *scaled = malloc(sizeof(float) * (size_t)rows * H);
    int32_t status = x2 && z && scaled ? OK : ERR_MEMORY;
    if (status == OK) {
        for (int r = 0; r < rows; r++) {
            float *row = x2 + (size_t)r * 2 * H;
            if (norm_w) rms(states + (size_t)r * H, norm_w, H, eps, row);
            else memcpy(row, states + (size_t)r * H, sizeof(float) * H);
            memcpy(row + H, embed + (size_t)ids[r] * H, sizeof(float) * H);
        }
        status = specdec_q8_linear(w, x2, rows, z, threads);
    }
    if (status == OK) {
        for (int r = 0; r < rows; r++) {
            const float *zr = z + (size_t)r * H;
            float *s = states_out + (size_t)r * H, *o = scaled + (size_t)r * H;
            float mean = 0.0f, var = 0.0f;
            for (int i = 0; i < H; i++) mean += zr[i];
            mean /= (float)H;
            for (int i = 0; i < H; i++) var += (zr[i] - mean) * (zr[i] - mean);
            const float inv = 1.0f / sqrtf(var / (float)H + 1e-5f);
            for (int i = 0; i < H; i++) {
                const float a = (zr[i] - mean) * inv * ln_w[i] + ln_b[i];
                s[i] = 0.5f * a * (1.0f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
                o[i] = s[i] * out_scale[i];
            }
        }
        status = specdec_q8_linear_topk(head, scaled, rows, top, idx, val, lse, NULL, threads);
    }
    free(x2), free(z), free(scaled);
    return status;
}

#endif
