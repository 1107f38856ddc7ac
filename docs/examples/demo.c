/* demo: one rcpipe handle shared by many threads.
 *
 *   demo HOST PORT [THREADS] [REQUESTS_PER_THREAD]
 *
 * Each thread does synchronous SET/GET pairs on its own keys and checks
 * every reply; at the end the handle's counters show how many commands
 * travelled in each write (implicit pipelining). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rcpipe.h>

static rcp_conn *conn;
static int per_thread = 2000;

static void *worker(void *arg)
{
    long id = (long)arg;
    char key[64], val[64];
    int i;
    for (i = 0; i < per_thread; i++) {
        rcp_reply *r;
        snprintf(key, sizeof key, "demo:%ld:%d", id, i % 100);
        snprintf(val, sizeof val, "value-%ld-%d", id, i);
        r = rcp_conn_command(conn, "SET %s %s", key, val);
        if (r->type != RCP_REPLY_STATUS) {
            fprintf(stderr, "SET failed: %s\n", r->str);
            exit(1);
        }
        rcp_reply_free(r);
        r = rcp_conn_command(conn, "GET %s", key);
        if (r->type != RCP_REPLY_STRING || strcmp(r->str, val) != 0) {
            fprintf(stderr, "GET returned the wrong value\n");
            exit(1);
        }
        rcp_reply_free(r);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rcp_conn_options o;
    rcp_conn_stats st;
    char err[256];
    pthread_t t[256];
    long i, n = 32;
    rcp_reply *r;

    if (argc < 3) {
        fprintf(stderr, "usage: %s HOST PORT [THREADS] [REQUESTS_PER_THREAD]\n", argv[0]);
        return 2;
    }
    if (argc > 3)
        n = atol(argv[3]);
    if (argc > 4)
        per_thread = atoi(argv[4]);
    if (n < 1 || n > 256 || per_thread < 1) {
        fprintf(stderr, "threads must be 1..256, requests >= 1\n");
        return 2;
    }
    rcp_conn_options_init(&o);
    o.host = argv[1];
    o.port = atoi(argv[2]);
    o.client_name = "rcpipe-demo";
    if (rcp_conn_open(&o, &conn, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "open failed: %s\n", err);
        return 1;
    }
    r = rcp_conn_command(conn, "PING");
    printf("rcpipe %s: PING -> %s\n", rcp_version(), r->str);
    rcp_reply_free(r);

    for (i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (i = 0; i < n; i++)
        pthread_join(t[i], NULL);

    rcp_conn_get_stats(conn, &st);
    printf("%ld threads x %d SET+GET pairs on one handle: all %llu replies checked\n", n,
           per_thread, (unsigned long long)st.replies);
    printf("writes: %llu for %llu commands (%.1f commands per write)\n",
           (unsigned long long)st.batches, (unsigned long long)st.commands_written,
           st.batches ? (double)st.commands_written / (double)st.batches : 0.0);
    rcp_conn_close(conn);
    return 0;
}
