/* The README's example, compiled by the build so it stays true. */
#include <stdio.h>
#include <rcpipe.h>

int main(void)
{
    rcp_conn_options o;
    rcp_conn *c;
    char err[256];

    rcp_conn_options_init(&o);          /* 127.0.0.1:6379 by default */
    if (rcp_conn_open(&o, &c, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Call from as many threads as you like: one handle, batched writes. */
    rcp_reply *r = rcp_conn_command(c, "SET %s %b", "greeting", "hello", (size_t)5);
    printf("SET -> %s\n", r->str);      /* "OK", or an error's text */
    rcp_reply_free(r);
    rcp_conn_close(c);
    return 0;
}
