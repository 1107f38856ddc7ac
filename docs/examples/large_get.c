/* large_get.c: read a large value without holding it (docs/large-values.md).
 *
 *   large-get HOST PORT KEY stream   GET KEY streamed to stdout (an fd sink)
 *   large-get HOST PORT KEY plain    GET KEY the ordinary way, then written
 *
 * Either way it writes the value to stdout and reports on stderr how much
 * the process's peak memory (VmHWM) grew during the GET: the figures in
 * docs/large-values.md come from it (large-get ... > /dev/null). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rcpipe.h>

/* A field of /proc/self/status in KiB (-1 if it is not there). */
static long status_kb(const char *field)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field) + 1, NULL, 10);
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    rcp_conn_options o;
    rcp_conn *c;
    rcp_reply *r;
    char err[256];
    const char *get[2] = {"GET", NULL};
    long before;
    int streamed, rc = 0;

    if (argc != 5 || (strcmp(argv[4], "stream") && strcmp(argv[4], "plain"))) {
        fprintf(stderr, "usage: %s HOST PORT KEY stream|plain\n", argv[0]);
        return 2;
    }
    streamed = strcmp(argv[4], "stream") == 0;
    rcp_conn_options_init(&o);
    o.host = argv[1];
    o.port = atoi(argv[2]);
    o.request_timeout_ms = 60000; /* a large value takes a while on a slow link */
    if (rcp_conn_open(&o, &c, err, sizeof err) != RCP_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    get[1] = argv[3];
    before = status_kb("VmHWM:");
    if (streamed) {
        /* The bytes go to stdout as they arrive; the reply is the length. */
        rcp_sink s;
        memset(&s, 0, sizeof s);
        s.kind = RCP_SINK_FD;
        s.fd = STDOUT_FILENO;
        r = rcp_conn_command_argv_sink(c, 2, get, NULL, &s);
        if (r->type == RCP_REPLY_INTEGER)
            fprintf(stderr, "streamed %lld bytes\n", r->integer);
    } else {
        /* The whole value in memory, then written. */
        r = rcp_conn_command_argv(c, 2, get, NULL);
        if (r->type == RCP_REPLY_STRING && fwrite(r->str, 1, r->len, stdout) == r->len)
            fprintf(stderr, "read %zu bytes\n", r->len);
    }
    if (r->type == RCP_REPLY_ERROR || r->type == RCP_REPLY_NIL) {
        fprintf(stderr, "GET %s: %s\n", argv[3], r->type == RCP_REPLY_NIL ? "(nil)" : r->str);
        rc = 1;
    }
    fprintf(stderr, "peak memory grew by %ld KiB during the GET\n", status_kb("VmHWM:") - before);
    rcp_reply_free(r);
    rcp_conn_close(c);
    return rc;
}
