/* The README's example: one handle, a sync call and an async call. */
#include <stdio.h>
#include <rcpipe.h>

static void on_reply(rcp_future *f, rcp_reply *r)
{
    /* Runs on the I/O thread: keep it short. r is valid only here. */
    printf("async GET -> %s\n", r->type == RCP_REPLY_STRING ? r->str : "(not a string)");
    rcp_waitgroup_done(f->data);
}

int main(void)
{
    rcp_conn_options o;
    rcp_conn *c;
    char err[256];
    rcp_future f = {0};
    rcp_waitgroup *wg = rcp_waitgroup_new();

    rcp_conn_options_init(&o); /* 127.0.0.1:6379 by default */
    if (!wg || rcp_conn_open(&o, &c, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "%s\n", wg ? err : "out of memory");
        return 1;
    }
    rcp_reply *r = rcp_conn_command(c, "SET %s %b", "greeting", "hello", (size_t)5);
    printf("SET -> %s\n", rcp_reply_str(r, NULL)); /* "OK", or the error's text */
    rcp_reply_free(r);

    f.resolve = on_reply;
    f.data = wg;
    rcp_waitgroup_add(wg, 1);
    if (rcp_conn_send(c, &f, "GET %s", "greeting") != RCP_OK)
        rcp_waitgroup_done(wg); /* refused: the callback never runs */
    rcp_waitgroup_wait(wg, -1); /* a real program does other work meanwhile */
    rcp_conn_close(c); /* resolves anything still outstanding */
    rcp_waitgroup_free(wg);
    return 0;
}
