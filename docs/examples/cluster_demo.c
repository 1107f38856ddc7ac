/* cluster_demo: many threads share one rcp_cluster handle.
 *
 *   cluster_demo SEED_HOST:PORT [THREADS] [SECONDS]
 *
 * Each thread does SET/GET/INCR on keys spread over all slots and checks
 * every reply; once a second the handle's counters are printed (redirects
 * followed, retries, map version), so a reshard or failover running
 * meanwhile can be watched being absorbed. At the end the INCR counters are
 * read back and must add up. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rcpipe.h>

#define NCOUNTERS 64

static rcp_cluster *cl;
static atomic_int stop;
static atomic_long ok_ops, failed_ops, incrs[NCOUNTERS];

static void *worker(void *arg)
{
    long id = (long)arg, i = 0;
    char key[64], val[64];
    while (!atomic_load(&stop)) {
        rcp_reply *r;
        int c = (int)((id * 7 + i) % NCOUNTERS);
        snprintf(key, sizeof key, "demo:%ld:%ld", id, i % 1000);
        snprintf(val, sizeof val, "v%ld", i);
        r = rcp_cluster_command(cl, "SET %s %s", key, val);
        if (r->type == RCP_REPLY_STATUS)
            atomic_fetch_add(&ok_ops, 1);
        else
            atomic_fetch_add(&failed_ops, 1);
        rcp_reply_free(r);
        r = rcp_cluster_command(cl, "GET %s", key);
        if (r->type == RCP_REPLY_STRING && strcmp(r->str, val) == 0)
            atomic_fetch_add(&ok_ops, 1);
        else
            atomic_fetch_add(&failed_ops, 1);
        rcp_reply_free(r);
        snprintf(key, sizeof key, "demo:counter:%d", c);
        r = rcp_cluster_command(cl, "INCR %s", key);
        if (r->type == RCP_REPLY_INTEGER) {
            atomic_fetch_add(&ok_ops, 1);
            atomic_fetch_add(&incrs[c], 1);
        } else {
            atomic_fetch_add(&failed_ops, 1);
        }
        rcp_reply_free(r);
        i++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rcp_cluster_options o;
    rcp_cluster_stats st;
    char err[2048];
    pthread_t t[256];
    long n = 16, secs = 10, i, mismatched = 0;
    int c;

    if (argc < 2) {
        fprintf(stderr, "usage: %s SEED_HOST:PORT [THREADS] [SECONDS]\n", argv[0]);
        return 2;
    }
    if (argc > 2)
        n = atol(argv[2]);
    if (argc > 3)
        secs = atol(argv[3]);
    if (n < 1 || n > 256 || secs < 1)
        return 2;
    rcp_cluster_options_init(&o);
    o.seeds = argv[1];
    if (rcp_cluster_open(&o, &cl, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "open failed: %s\n", err);
        return 1;
    }
    for (c = 0; c < NCOUNTERS; c++) {
        char key[64];
        rcp_reply *r;
        snprintf(key, sizeof key, "demo:counter:%d", c);
        r = rcp_cluster_command(cl, "DEL %s", key);
        rcp_reply_free(r);
    }
    for (i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (i = 1; i <= secs; i++) {
        sleep(1);
        rcp_cluster_get_stats(cl, &st);
        printf("t=%2lds ok=%ld failed=%ld moved=%llu ask=%llu retries=%llu map=v%llu nodes=%llu\n", i,
               atomic_load(&ok_ops), atomic_load(&failed_ops), (unsigned long long)st.moved,
               (unsigned long long)st.ask,
               (unsigned long long)(st.retries_tryagain + st.retries_clusterdown +
                                    st.retries_loading + st.retries_masterdown +
                                    st.retries_not_sent + st.retries_io + st.retries_readonly),
               (unsigned long long)st.map_version, (unsigned long long)st.nodes);
        fflush(stdout);
    }
    atomic_store(&stop, 1);
    for (i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    for (c = 0; c < NCOUNTERS; c++) {
        char key[64];
        rcp_reply *r;
        snprintf(key, sizeof key, "demo:counter:%d", c);
        r = rcp_cluster_command(cl, "GET %s", key);
        if (r->type != RCP_REPLY_STRING || atol(r->str) != atomic_load(&incrs[c]))
            mismatched++;
        rcp_reply_free(r);
    }
    printf("%ld threads, %ld s: %ld requests ok, %ld failed; counters that do not add up: %ld\n", n,
           secs, atomic_load(&ok_ops), atomic_load(&failed_ops), mismatched);
    rcp_cluster_close(cl);
    return (atomic_load(&failed_ops) || mismatched) ? 1 : 0;
}
