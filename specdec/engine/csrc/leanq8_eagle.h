/* leanq8_eagle.h: included once by leanq8.c after leanq8_topk.h (it uses handle_t, lin_t, rms,
 * specdec_q8_linear, forward_checked and specdec_topk). One level of EAGLE's draft in one call. */
#ifndef SPECDEC_LEANQ8_EAGLE_H
#define SPECDEC_LEANQ8_EAGLE_H

/* EAGLE's inputs for k rows: row r = fc([rms(feats[r]) * norm_w, embed[ids[r]]]) (k x hidden into out),
 * where feats are (k x hidden) pre-norm features, embed the target's (vocab x hidden) float32 table and
 * fc a standalone linear of (hidden, 2 hidden) (its rows quantized per block of 32 and multiplied as
 * specdec_q8_linear does). Returns OK, ERR_ARGUMENT (nothing written: a NULL pointer, fc's shape not
 * (hidden, 2 hidden), eps not > 0, k < 1, a token id outside [0, vocab), a feature not finite),
 * ERR_MEMORY. */
int32_t specdec_q8_eagle_inputs(const handle_t *h, lin_t *fc, const float *norm_w, float eps, const float *embed,
                                int32_t vocab, const float *feats, const int64_t *ids, int32_t k, float *out,
                                int32_t threads) {
    if (!h || !fc || !norm_w || !embed || !feats || !ids || !out) return ERR_ARGUMENT;
    const int H = h->hidden;
    if (fc->w.k != 2 * H || fc->w.n != H || !(eps > 0.0f) || k < 1 || vocab < 1 || threads < 1 || threads > 1024)
        return ERR_ARGUMENT;
    for (int r = 0; r < k; r++)
        if (ids[r] < 0 || ids[r] >= vocab) return ERR_ARGUMENT;
    for (size_t i = 0; i < (size_t)k * H; i++)
        if (!isfinite(feats[i])) return ERR_ARGUMENT;
    float *x2 = malloc(sizeof(float) * (size_t)k * 2 * H);
    if (!x2) return ERR_MEMORY;
    for (int r = 0; r < k; r++) {
        float *row = x2 + (size_t)r * 2 * H;
        rms(feats + (size_t)r * H, norm_w, H, eps, row);
        memcpy(row + H, embed + (size_t)ids[r] * H, sizeof(float) * H);
    }
    const int32_t status = specdec_q8_linear(fc, x2, k, out, threads);
    free(x2);
    return status;
}

/* One level of EAGLE's draft (a chain's next row, or an EAGLE-2 tree level's expanded nodes): the
 * inputs of specdec_q8_eagle_inputs, then the draft layer's forward over them at slots start ..
 * start+k-1 (h: the layer's model, its head the kept vocabulary; parents NULL: a chain, prefix ==
 * start; else the tree region's parents as specdec_q8_forward_spec takes them, this call's k rows
 * last), every row's pre-norm output into features (k x hidden), and the top `top` entries of the last
 * `keep` rows' logits with each row's log sum exp (specdec_topk: idx, val keep x top; lse keep). The
 * same bits as those three calls made one after another. Returns OK, ERR_ARGUMENT (nothing written),
 * ERR_MEMORY. */
int32_t specdec_q8_eagle_level(handle_t *h, lin_t *fc, const float *norm_w, float eps, const float *embed,
                               int32_t vocab, const float *feats, const int64_t *ids, const int32_t *parents,
                               int32_t k, int32_t start, int32_t prefix, float *cache, int32_t capacity,
                               int32_t keep, int32_t threads, float *features, int32_t top, int32_t *idx,
                               float *val, float *lse) {
    if (!h || !features || !idx || !val || !lse || keep < 1 || keep > k || top < 1 || top > TOPK_MAX ||
        top > h->head.n)
        return ERR_ARGUMENT;
    float *emb = malloc(sizeof(float) * (size_t)(k > 0 ? k : 1) * h->hidden);
    float *logits = malloc(sizeof(float) * (size_t)keep * h->head.n);
    int32_t status = emb && logits ? OK : ERR_MEMORY;
    if (status == OK) status = specdec_q8_eagle_inputs(h, fc, norm_w, eps, embed, vocab, feats, ids, k, emb, threads);
    if (status == OK)
        status = forward_checked(h, NULL, emb, parents, k, start, prefix, cache, capacity, logits, keep,
                                 h->n_layers, threads, features);
    if (status == OK) status = specdec_topk(logits, keep, h->head.n, top, idx, val, lse);
    free(emb), free(logits);
    return status;
}

#endif
