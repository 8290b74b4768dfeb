/* The process-wide thread pool of leanq8.c (static functions: included by leanq8.c only). */
#ifndef SPECDEC_LEAN_POOL_H
#define SPECDEC_LEAN_POOL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "lean_common.h" /* now(): the monotonic clock */

/* --- a small thread pool, one per process ------------------------------------------------- *
 * A call's parallel work is split into `parts` fixed parts (part p: a fixed range of tiles or of
 * (row, head) pairs), part 0 run by the calling thread and part p by worker p - 1. Which thread
 * runs a part never changes what it computes, so results do not depend on the thread count.
 * A worker waits for the next job by spinning (PAUSE) for a bounded time, SPIN_BUDGET_S after its last
 * job, then sleeps on the condition variable: the calls of one generation (a step, then the loop's own
 * Python and torch work, then the next step) come well within the budget, so a call finds its workers
 * awake instead of paying a wake-up each, and a process that stops decoding holds no core for longer
 * than the budget. While spinning a worker yields the CPU every YIELD_EVERY_S: on a machine shared with
 * other processes a spinning waiter must not hold the core its partner needs. (Before, a worker spun
 * 4000 PAUSEs, whose length differs several-fold between CPUs, then yielded 200 times, then slept: on
 * a 2-core Xeon, with 0.3 ms of Python between two calls of a one-layer model, each call found its
 * worker asleep and took 0.31 ms instead of the 0.22 ms of back-to-back calls.) One pool serves every
 * model of the process (made for the thread count of the call, remade when it changes): a target
 * and its draft alternate every round of speculative decoding, and one pool per model left the
 * other model's workers spinning on the cores the running model needed (measured on a 2-core
 * EPYC: a one-layer draft's step 0.6 ms on one thread, 1.5 ms on two). */
typedef void (*part_fn)(void *arg, int part, int parts);

typedef struct {
    int workers; /* threads - 1 */
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;     /* bumped for each job */
    atomic_int pending;  /* workers still running the current job */
    atomic_int sleepers; /* workers waiting on cv */
    int stop;
    part_fn fn;
    void *arg;
    int parts;
} pool_t;

typedef struct {
    pool_t *pool;
    int id;
} worker_arg_t;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

enum { SPIN_PAUSE = 4000 };   /* the caller's wait for its workers: PAUSEs, then yields */
enum { SPIN_CHECK = 64 };     /* PAUSEs between two reads of the clock while a worker spins */
#define SPIN_BUDGET_S 2e-3    /* a worker spins this long after its last job, then sleeps */
#define YIELD_EVERY_S 50e-6   /* and yields the CPU this often while it spins */

static void *worker_main(void *p) {
    worker_arg_t *wa = p;
    pool_t *pool = wa->pool;
    const int id = wa->id;
    free(wa);
    unsigned seen = 0; /* the generation at the pool's creation: a job posted before this thread
                        * first runs must still be seen as new */
    for (;;) {
        unsigned now_gen;
        int spins = 0;
        double idle_since = now(), yielded = idle_since; /* the budget starts at the last job */
        while ((now_gen = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen) {
            cpu_relax();
            if (++spins < SPIN_CHECK) continue;
            spins = 0;
            const double t = now();
            if (t - idle_since < SPIN_BUDGET_S) {
                if (t - yielded >= YIELD_EVERY_S) sched_yield(), yielded = t;
                continue;
            }
            pthread_mutex_lock(&pool->mu); /* the budget is spent: sleep until the next job */
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->gen) == seen && !pool->stop) pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            if (pool->stop) return NULL;
            idle_since = yielded = now();
        }
        seen = now_gen;
        if (pool->stop) return NULL;
        if (id + 1 < pool->parts) pool->fn(pool->arg, id + 1, pool->parts);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
}

static void pool_free(pool_t *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    atomic_fetch_add(&pool->gen, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->workers; i++) pthread_join(pool->tids[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->tids);
    free(pool);
}

static pool_t *pool_new(int workers) {
    pool_t *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->tids = calloc((size_t)workers, sizeof *pool->tids);
    if (!pool->tids) {
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    atomic_init(&pool->gen, 0), atomic_init(&pool->pending, 0), atomic_init(&pool->sleepers, 0);
    for (int i = 0; i < workers; i++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        if (!wa) {
            pool_free(pool); /* joins the workers started so far */
            return NULL;
        }
        wa->pool = pool, wa->id = i;
        if (pthread_create(&pool->tids[i], NULL, worker_main, wa) != 0) {
            free(wa);
            pool_free(pool);
            return NULL;
        }
        pool->workers = i + 1;
    }
    return pool;
}

/* Run fn over parts 0 .. parts-1 (parts <= workers + 1) and wait for all of them. */
static void pool_run(pool_t *pool, part_fn fn, void *arg, int parts) {
    if (!pool || parts <= 1) {
        for (int p = 0; p < parts; p++) fn(arg, p, parts);
        return;
    }
    pool->fn = fn, pool->arg = arg, pool->parts = parts;
    atomic_store_explicit(&pool->pending, pool->workers, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, parts);
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; spins++) {
        if (spins < SPIN_PAUSE) cpu_relax();
        else sched_yield();
    }
}

#endif
