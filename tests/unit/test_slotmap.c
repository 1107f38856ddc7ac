/* Unit test: the slot map under RCU, in the style of urcu's rcutorture:
 * reader threads look slots up without locks while a writer publishes new
 * maps in a loop and frees the old ones after a grace period; MOVED-style
 * per-slot stores race with both. Meant to be run under ASan and TSan. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include <urcu-bp.h>

#include "cluster_int.h"
#include "common.h"

#define NODES 8
static rcp__node nodes[NODES];
static atomic_int stop;
static _Atomic(rcp__map *) published;
static atomic_long lookups, bad;

/* A map whose every slot points at a shard whose master is
 * nodes[(slot + gen) % NODES]; a reader can check what it sees. */
static rcp__map *make_map(unsigned gen)
{
    rcp__map *m = rcp__map_new();
    unsigned s;
    ck_assert_ptr_nonnull(m);
    m->shards = calloc(NODES, sizeof(rcp__shard));
    m->nshards = NODES;
    m->version = gen;
    for (s = 0; s < NODES; s++)
        m->shards[s].master = &nodes[(s + gen) % NODES];
    for (s = 0; s < RCP__SLOTS; s++)
        atomic_store(&m->slots[s], &m->shards[s % NODES]);
    return m;
}

static void free_map(rcp__map *m)
{
    /* shards came from calloc here, not the library allocator: same
     * allocator by default, so rcp__map_free can free them. */
    rcp__map_free(m);
}

static void *reader(void *arg)
{
    unsigned s = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&stop)) {
        rcp__map *m;
        rcp__shard *sh;
        urcu_bp_read_lock();
        m = rcu_dereference(published);
        sh = atomic_load(&m->slots[s % RCP__SLOTS]);
        /* Either the map's own shard for the slot, or a MOVED shard whose
         * master is one of our nodes. */
        if (!sh || !sh->master || sh->master < &nodes[0] || sh->master >= &nodes[NODES])
            atomic_fetch_add(&bad, 1);
        urcu_bp_read_unlock();
        /* Yield now and then: two cores, many spinning threads, and the
         * writer must get to run (sanitized builds are 10x slower). */
        if ((atomic_fetch_add(&lookups, 1) & 63) == 0)
            sched_yield();
        s = s * 1103515245u + 12345u;
    }
    return NULL;
}

static void *mover(void *arg)
{
    unsigned s = 7;
    (void)arg;
    while (!atomic_load(&stop)) {
        urcu_bp_read_lock();
        rcp__map_move_slot(rcu_dereference(published), s % RCP__SLOTS, &nodes[s % NODES]);
        urcu_bp_read_unlock();
        sched_yield();
        s = s * 1103515245u + 12345u;
    }
    return NULL;
}

START_TEST(readers_against_a_swapping_writer)
{
    pthread_t r[4], mv;
    unsigned gen, i;
    time_t t0 = time(NULL);
    atomic_store(&published, make_map(0));
    for (i = 0; i < 4; i++)
        pthread_create(&r[i], NULL, reader, (void *)(uintptr_t)(i * 977));
    pthread_create(&mv, NULL, mover, NULL);
    /* The readers must be running before the swaps start: on a loaded
     * machine the 300 swaps (nothing to wait for in a grace period while
     * no reader is inside one) were once all done before any reader had
     * run, and the test saw no lookup at all. */
    while (atomic_load(&lookups) < 1000 && time(NULL) < t0 + 10)
        sched_yield();
    t0 = time(NULL);
    /* 300 swaps, or 3 s of them (sanitized builds are slower). */
    for (gen = 1; gen <= 300 && (gen < 10 || time(NULL) < t0 + 3); gen++) {
        rcp__map *old = rcu_xchg_pointer(&published, make_map(gen));
        urcu_bp_synchronize_rcu();
        free_map(old);
    }
    atomic_store(&stop, 1);
    for (i = 0; i < 4; i++)
        pthread_join(r[i], NULL);
    pthread_join(mv, NULL);
    free_map(atomic_load(&published));
    ck_assert_int_eq(atomic_load(&bad), 0);
    ck_assert_int_gt(atomic_load(&lookups), 0);
}
END_TEST

START_TEST(move_slot_records_the_new_owner)
{
    rcp__map *m = make_map(0);
    ck_assert_ptr_eq(atomic_load(&m->slots[5])->master, &nodes[5]);
    ck_assert_int_eq(rcp__map_move_slot(m, 5, &nodes[2]), 0);
    ck_assert_ptr_eq(atomic_load(&m->slots[5])->master, &nodes[2]);
    /* the same move again allocates nothing new */
    ck_assert_int_eq(rcp__map_move_slot(m, 5, &nodes[2]), 0);
    ck_assert_ptr_nonnull(m->moved);
    ck_assert_ptr_null(m->moved->next);
    ck_assert_int_eq(rcp__map_move_slot(m, RCP__SLOTS, &nodes[2]), -1);
    free_map(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("slotmap");
    TCase *tc = rcptest_tcase(s, "core", 120);

    RCPTEST_ADD(tc, move_slot_records_the_new_owner, readers_against_a_swapping_writer);
    return rcptest_run(s) ? 1 : 0;
}
