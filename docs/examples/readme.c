/* The README's example, compiled by the build so it stays true (the
 * readme-example test checks that the README shows exactly this file). */
#include <stdio.h>
#include <rcpipe.h>

int main(int argc, char **argv)
{
    rcp_cluster_options o;
    rcp_cluster *cl;
    char err[1024];
    long long n;

    rcp_cluster_options_init(&o);
    o.seeds = argc > 1 ? argv[1] : "127.0.0.1:7000"; /* any node(s) of the cluster */
    if (rcp_cluster_open(&o, &cl, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Call from as many threads as you like: one handle, batched writes,
     * each command routed to the node that owns its key. */
    rcp_reply *r = rcp_cluster_command(cl, "SET %s %b", "greeting", "hello", (size_t)5);
    printf("SET -> %s\n", rcp_reply_str(r, NULL)); /* "OK", or an error's text */
    rcp_reply_free(r);
    r = rcp_cluster_command(cl, "INCR %s", "visits");
    if (rcp_reply_int(r, &n) == RCP_OK)
        printf("visits: %lld\n", n);
    rcp_reply_free(r);
    rcp_cluster_close(cl);
    return 0;
}
