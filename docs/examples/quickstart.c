/* The README's example: one handle, a sync call and an async call. */
#include <stdatomic.h>
#include <stdio.h>
#include <rcpipe.h>

static void on_reply(rcp_future *f, rcp_reply *r)
{
    /* Runs on the I/O thread: keep it short. r is valid only here. */
    printf("async GET -> %s\n", r->type == RCP_REPLY_STRING ? r->str : "(not a string)");
    atomic_store((atomic_int *)f->data, 1);
}

int main(void)
{
    rcp_conn_options o;
    rcp_conn *c;
    char err[256];
    rcp_future f = {0};
    atomic_int done = 0;

    rcp_conn_options_init(&o); /* 127.0.0.1:6379 by default */
    if (rcp_conn_open(&o, &c, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rcp_reply *r = rcp_conn_command(c, "SET %s %b", "greeting", "hello", (size_t)5);
    printf("SET -> %s\n", r->str); /* "OK", or the error's text */
    rcp_reply_free(r);

    f.resolve = on_reply;
    f.data = &done;
    if (rcp_conn_send(c, &f, "GET %s", "greeting") == RCP_OK)
        while (!atomic_load(&done)) { /* a real program does other work here */ }
    rcp_conn_close(c); /* resolves anything still outstanding */
    return 0;
}
