/* leanq8_suffix.h: included once by leanq8.c (ABI 11). Suffix decoding's trie and its speculation in C:
 * the same arrays, the same sibling order, the same float32 arithmetic and the same libstdc++ heap order
 * as specdec/drafting/suffix.py's SuffixTree (its pure-Python reference), so drafts, probabilities and
 * scores agree bit for bit (the tests compare both on random texts and arctic-inference's outputs).
 *
 * A trie is an opaque handle (specdec_sfx_new / specdec_sfx_free) holding, per node, its count, token,
 * number of children and a doubly linked list of children in arctic's sibling order, and an
 * open-addressing table from (parent << 32 | token) to the child. A sequence's active nodes (its suffixes
 * of at most max_depth tokens, longest first) live in the caller's int32 array of max_depth entries. */
#ifndef SPECDEC_LEANQ8_SUFFIX_H
#define SPECDEC_LEANQ8_SUFFIX_H

typedef struct {
    int32_t max_depth;
    int64_t n, cap; /* nodes (the root is node 0) and the arrays' room */
    int64_t *count;
    int64_t *token;
    int32_t *nchild, *first, *last, *next, *prev;
    uint64_t *keys; /* the edge table: key + 1 (0: an empty slot), and the child */
    int32_t *vals;
    int64_t slots, used;
} sfx_t;

static uint64_t sfx_hash(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void specdec_sfx_free(sfx_t *t) {
    if (!t) return;
    free(t->count), free(t->token), free(t->nchild), free(t->first), free(t->last), free(t->next);
    free(t->prev), free(t->keys), free(t->vals), free(t);
}

static int sfx_room(sfx_t *t, int64_t n) { /* room for n nodes; 0, or -1 when out of memory */
    if (n <= t->cap) return 0;
    int64_t cap = t->cap ? 2 * t->cap : 1024;
    while (cap < n) cap *= 2;
    void *p[7] = {realloc(t->count, 8 * (size_t)cap), realloc(t->token, 8 * (size_t)cap),
                  realloc(t->nchild, 4 * (size_t)cap), realloc(t->first, 4 * (size_t)cap),
                  realloc(t->last, 4 * (size_t)cap), realloc(t->next, 4 * (size_t)cap),
                  realloc(t->prev, 4 * (size_t)cap)};
    if (p[0]) t->count = p[0];
    if (p[1]) t->token = p[1];
    if (p[2]) t->nchild = p[2];
    if (p[3]) t->first = p[3];
    if (p[4]) t->last = p[4];
    if (p[5]) t->next = p[5];
    if (p[6]) t->prev = p[6];
    for (int i = 0; i < 7; i++)
        if (!p[i]) return -1;
    t->cap = cap;
    return 0;
}

static int64_t sfx_find(const sfx_t *t, uint64_t key) { /* the slot of key, or of the empty slot for it */
    const uint64_t mask = (uint64_t)t->slots - 1;
    uint64_t s = sfx_hash(key) & mask;
    while (t->keys[s] && t->keys[s] != key + 1) s = (s + 1) & mask;
    return (int64_t)s;
}

static int sfx_rehash(sfx_t *t) { /* double the edge table; 0, or -1 when out of memory */
    const int64_t slots = t->slots ? 2 * t->slots : 4096;
    uint64_t *keys = calloc((size_t)slots, 8);
    int32_t *vals = malloc(4 * (size_t)slots);
    if (!keys || !vals) {
        free(keys), free(vals);
        return -1;
    }
    uint64_t *old_keys = t->keys;
    int32_t *old_vals = t->vals;
    const int64_t old = t->slots;
    t->keys = keys, t->vals = vals, t->slots = slots;
    for (int64_t s = 0; s < old; s++)
        if (old_keys[s]) {
            const int64_t at = sfx_find(t, old_keys[s] - 1);
            keys[at] = old_keys[s], vals[at] = old_vals[s];
        }
    free(old_keys), free(old_vals);
    return 0;
}

sfx_t *specdec_sfx_new(int32_t max_depth) {
    if (max_depth < 1) return NULL;
    sfx_t *t = calloc(1, sizeof(sfx_t));
    if (!t) return NULL;
    t->max_depth = max_depth;
    if (sfx_room(t, 1) || sfx_rehash(t)) {
        specdec_sfx_free(t);
        return NULL;
    }
    t->n = 1; /* the root */
    t->count[0] = 0, t->token[0] = -1, t->nchild[0] = 0;
    t->first[0] = t->last[0] = t->next[0] = t->prev[0] = -1;
    return t;
}

/* Appends tokens[0..n-1] (each in [0, 2**32)) to a sequence whose active nodes are active[0..*nactive-1]
 * (longest suffix first, each a node of the trie; room for max_depth). Returns the trie's node count,
 * ERR_ARGUMENT (-2) for bad arguments (nothing changed) or -3 when out of memory or past 2**31 - 1 nodes
 * (the tokens before the failing one appended). */
int64_t specdec_sfx_append(sfx_t *t, int32_t *active, int32_t *nactive, const int64_t *tokens, int64_t n) {
    if (!t || !active || !nactive || (n && !tokens) || n < 0 || *nactive < 0 || *nactive > t->max_depth)
        return ERR_ARGUMENT;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > 0xffffffffLL) return ERR_ARGUMENT;
    for (int32_t i = 0; i < *nactive; i++)
        if (active[i] < 0 || active[i] >= t->n) return ERR_ARGUMENT;
    int64_t *count = t->count;
    for (int64_t q = 0; q < n; q++) {
        const int64_t token = tokens[q];
        if (t->n + t->max_depth > INT32_MAX || sfx_room(t, t->n + t->max_depth)) return -3;
        while (2 * (t->used + t->max_depth) > t->slots)
            if (sfx_rehash(t)) return -3;
        count = t->count;
        int32_t *nchild = t->nchild, *first = t->first, *last = t->last, *nxt = t->next, *prev = t->prev;
        if (*nactive == t->max_depth) { /* a suffix of max_depth tokens is not extended further */
            memmove(active, active + 1, sizeof(int32_t) * (size_t)(t->max_depth - 1));
            (*nactive)--;
        }
        active[(*nactive)++] = 0;
        count[0] += 1;
        for (int32_t i = 0; i < *nactive; i++) {
            const int32_t node = active[i];
            const uint64_t key = ((uint64_t)node << 32) | (uint64_t)token;
            const int64_t s = sfx_find(t, key);
            int32_t child;
            if (!t->keys[s]) { /* a new child joins the end of the sibling list */
                child = (int32_t)t->n++;
                t->keys[s] = key + 1, t->vals[s] = child, t->used++;
                count[child] = 1, t->token[child] = token, nchild[child] = 0;
                first[child] = last[child] = nxt[child] = -1;
                const int32_t tail = last[node];
                prev[child] = tail;
                if (tail < 0)
                    first[node] = child;
                else
                    nxt[tail] = child;
                last[node] = child;
                nchild[node] += 1;
            } else {
                child = t->vals[s];
                const int32_t before = prev[child];
                /* arctic's _increment_count (see suffix.py): the root's order is never read */
                if (node && before >= 0 && count[before] <= count[child] + 1) {
                    const int64_t head = count[before];
                    int32_t j = before;
                    while (prev[j] >= 0 && count[prev[j]] == head) j = prev[j];
                    const int32_t after = nxt[child]; /* unlink the child ... */
                    nxt[before] = after;
                    if (after >= 0)
                        prev[after] = before;
                    else
                        last[node] = before;
                    const int32_t ahead = prev[j]; /* ... and put it before j */
                    prev[child] = ahead, nxt[child] = j, prev[j] = child;
                    if (ahead >= 0)
                        nxt[ahead] = child;
                    else
                        first[node] = child;
                }
                count[child] += 1;
            }
            active[i] = child;
        }
    }
    return t->n;
}

/* The node of ids[0..n-1] below node 0 (-1: not in the trie); ERR_ARGUMENT for bad arguments. */
int32_t specdec_sfx_walk(const sfx_t *t, const int64_t *ids, int64_t n) {
    if (!t || (n && !ids) || n < 0) return ERR_ARGUMENT;
    int32_t node = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > 0xffffffffLL) return -1;
        const int64_t s = sfx_find(t, ((uint64_t)node << 32) | (uint64_t)ids[i]);
        if (!t->keys[s]) return -1;
        node = t->vals[s];
    }
    return node;
}

/* Node count, and node's (count, token, children, first, last, next, prev) into out[0..6]; ERR_ARGUMENT
 * for a node outside the trie. */
int64_t specdec_sfx_node(const sfx_t *t, int64_t node, int64_t *out) {
    if (!t || !out || node < 0 || node >= t->n) return ERR_ARGUMENT;
    out[0] = t->count[node], out[1] = t->token[node], out[2] = t->nchild[node], out[3] = t->first[node];
    out[4] = t->last[node], out[5] = t->next[node], out[6] = t->prev[node];
    return t->n;
}

typedef struct { /* an item of arctic's queue: (prob, node, emit?, parent), keyed by prob */
    float prob;
    int32_t at, emit, parent;
} sfx_item;

typedef struct {
    sfx_item *items;
    int64_t n, cap;
} sfx_heap;

static void sfx_sift_up(sfx_heap *h, int64_t hole, sfx_item item) { /* libstdc++'s __push_heap */
    int64_t parent = (hole - 1) / 2;
    while (hole > 0 && h->items[parent].prob < item.prob) {
        h->items[hole] = h->items[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    h->items[hole] = item;
}

static int sfx_push(sfx_heap *h, sfx_item item) {
    if (h->n == h->cap) {
        const int64_t cap = h->cap ? 2 * h->cap : 64;
        sfx_item *p = realloc(h->items, sizeof(sfx_item) * (size_t)cap);
        if (!p) return -1;
        h->items = p, h->cap = cap;
    }
    h->n++;
    sfx_sift_up(h, h->n - 1, item);
    return 0;
}

static sfx_item sfx_pop(sfx_heap *h) { /* libstdc++'s pop_heap (__adjust_heap), then the last item */
    sfx_item *heap = h->items;
    const int64_t n = h->n;
    if (n == 1) return heap[--h->n];
    const sfx_item top = heap[0], value = heap[n - 1];
    heap[n - 1] = top;
    const int64_t length = n - 1;
    int64_t hole = 0, child = 0;
    while (child < (length - 1) / 2) {
        child = 2 * (child + 1);
        if (heap[child].prob < heap[child - 1].prob) child--;
        heap[hole] = heap[child];
        hole = child;
    }
    if (length % 2 == 0 && child == (length - 2) / 2) {
        child = 2 * (child + 1);
        heap[hole] = heap[child - 1];
        hole = child - 1;
    }
    sfx_sift_up(h, hole, value);
    return heap[--h->n];
}

static int32_t sfx_next_in_node(const sfx_t *t, int32_t node) { /* arctic's compressed node: its only
                                                                    child, of equal count; else -1 */
    if (t->nchild[node] == 1) {
        const int32_t child = t->first[node];
        if (t->count[child] == t->count[node]) return child;
    }
    return -1;
}

/* A draft below node into tok / par / prob (room for max_tokens); returns its size (-3: out of memory). */
static int32_t sfx_grow_tree(const sfx_t *t, sfx_heap *h, int32_t node, int32_t max_tokens, float threshold,
                             int64_t *tok, int32_t *par, float *prob_out, float *score_out) {
    int32_t m = 0;
    float score = 0.0f;
    h->n = 0;
    int32_t after = sfx_next_in_node(t, node);
    if (sfx_push(h, after < 0 ? (sfx_item){1.0f, node, 0, -1} : (sfx_item){1.0f, after, 1, -1})) return -3;
    while (h->n && m < max_tokens) {
        sfx_item it = sfx_pop(h);
        if (it.emit) {
            int32_t index;
            for (;;) {
                tok[m] = t->token[it.at], par[m] = it.parent, prob_out[m] = it.prob;
                score = score + it.prob;
                index = m++;
                after = sfx_next_in_node(t, it.at);
                if (after < 0 || h->n || m >= max_tokens) break;
                it.at = after, it.parent = index;
            }
            if (sfx_push(h, after < 0 ? (sfx_item){it.prob, it.at, 0, index} : (sfx_item){it.prob, after, 1, index}))
                return -3;
        } else {
            const float here = (float)t->count[it.at];
            for (int32_t child = t->first[it.at]; child >= 0; child = t->next[child]) { /* sibling order */
                float p = it.prob * (float)t->count[child];
                p = p / here;
                if (p < threshold) break;
                if (sfx_push(h, (sfx_item){p, child, 1, it.parent})) return -3;
            }
        }
    }
    *score_out = score;
    return m;
}

static int32_t sfx_grow_path(const sfx_t *t, int32_t node, int32_t max_tokens, float threshold, int64_t *tok,
                             int32_t *par, float *prob_out, float *score_out) {
    int32_t m = 0;
    float score = 0.0f, prob = 1.0f;
    while (m < max_tokens) {
        const int32_t child = t->first[node]; /* the most frequent child */
        if (child < 0) break;
        if (t->count[child] != t->count[node]) prob = prob * ((float)t->count[child] / (float)t->count[node]);
        if (prob < threshold) break;
        node = child;
        par[m] = m - 1, tok[m] = t->token[node], prob_out[m] = prob;
        score = score + prob;
        m++;
    }
    *score_out = score;
    return m;
}

static int32_t sfx_max_tokens(int32_t m, float factor, float offset, int32_t cap) { /* suffix.py's */
    float x = (float)m * factor;
    x = x + offset;
    const double d = (double)x + 1e-6;
    if (!(d > 0.0)) return 0; /* also NaN: the cast below is defined only in range */
    if (d >= (double)cap) return cap;
    return (int32_t)d; /* truncation, as Python's int() */
}

/* SuffixTree.speculate_at: a draft from the match nodes (the match of length m = 1 .. nnodes: nodes[m - 1],
 * or nodes[nnodes - m] when flags has 2, a sequence's active nodes read in place) into tok / par / prob
 * (room for max_spec entries each), its score and match length; returns its size, ERR_ARGUMENT for bad
 * arguments, -3 when out of memory. flags 1: draft below the longest match with a child only. */
int32_t specdec_sfx_speculate(const sfx_t *t, const int32_t *nodes, int32_t nnodes, int32_t max_spec,
                              float factor, float offset, float threshold, int32_t tree, int32_t flags,
                              int64_t *tok, int32_t *par, float *prob, float *score, int32_t *match_len) {
    if (!t || (nnodes && !nodes) || nnodes < 0 || max_spec < 0 || !tok || !par || !prob || !score ||
        !match_len || flags < 0 || flags > 3)
        return ERR_ARGUMENT;
    const int longest = flags & 1, rev = flags & 2;
    for (int32_t i = 0; i < nnodes; i++)
        if (nodes[i] < 0 || nodes[i] >= t->n) return ERR_ARGUMENT;
    sfx_heap h = {0};
    int32_t size = 0, best_m = 0;
    float best_score = 0.0f;
    *score = 0.0f;
    if (longest) {
        for (int32_t m = nnodes; m > 0; m--) {
            const int32_t node = rev ? nodes[nnodes - m] : nodes[m - 1];
            if (!t->nchild[node]) continue;
            const int32_t cap = sfx_max_tokens(m, factor, offset, max_spec);
            size = tree ? sfx_grow_tree(t, &h, node, cap, threshold, tok, par, prob, score)
                        : sfx_grow_path(t, node, cap, threshold, tok, par, prob, score);
            best_m = m;
            break;
        }
        free(h.items);
        *match_len = best_m;
        return size;
    }
    /* arctic's choice by score walked from the longest match down (suffix.py): the draft being grown goes
     * into scratch, then into the output when it beats the best */
    int64_t *stok = malloc(sizeof(int64_t) * (size_t)(max_spec ? max_spec : 1));
    int32_t *spar = malloc(sizeof(int32_t) * (size_t)(max_spec ? max_spec : 1));
    float *sprob = malloc(sizeof(float) * (size_t)(max_spec ? max_spec : 1));
    if (!stok || !spar || !sprob) {
        free(stok), free(spar), free(sprob);
        return -3;
    }
    int have_best = 0;
    for (int32_t m = nnodes; m > 0; m--) {
        const int32_t node = rev ? nodes[nnodes - m] : nodes[m - 1];
        const int32_t cap = t->nchild[node] ? sfx_max_tokens(m, factor, offset, max_spec) : 0;
        if ((float)cap <= best_score) { /* cannot beat the best (suffix.py compares int <= float) */
            if (!best_m) best_m = m;
            continue;
        }
        float s = 0.0f;
        const int32_t k = tree ? sfx_grow_tree(t, &h, node, cap, threshold, stok, spar, sprob, &s)
                               : sfx_grow_path(t, node, cap, threshold, stok, spar, sprob, &s);
        if (k < 0) {
            size = k;
            break;
        }
        if (s > best_score || !best_m) {
            memcpy(tok, stok, sizeof(int64_t) * (size_t)k);
            memcpy(par, spar, sizeof(int32_t) * (size_t)k);
            memcpy(prob, sprob, sizeof(float) * (size_t)k);
            size = k, best_m = m, best_score = s, have_best = 1;
        }
    }
    free(stok), free(spar), free(sprob), free(h.items);
    if (size < 0) return size;
    *score = have_best ? best_score : 0.0f;
    *match_len = best_m;
    return have_best ? size : 0;
}

#endif
