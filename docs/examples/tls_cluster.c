/* docs/tls.md: a cluster that only speaks TLS. Every connection of the
 * handle (masters, replicas, spares, blocking, WATCH, pub/sub, the
 * refresher's) takes the node options' TLS settings.
 *
 *   tls_cluster HOST:PORT CA_FILE [CERT_FILE KEY_FILE] */
#include <stdio.h>

#include <rcpipe.h>

int main(int argc, char **argv)
{
    rcp_cluster_options co;
    rcp_conn_options node;
    rcp_cluster *cl;
    rcp_reply *r;
    char err[1024];
    int rc;

    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: %s HOST:PORT CA_FILE [CERT_FILE KEY_FILE]\n", argv[0]);
        return 2;
    }
    rcp_cluster_options_init(&co);
    rcp_conn_options_init(&node);
    co.seeds = argv[1];
    co.node = &node;
    node.tls = 1;
    node.tls_ca_file = argv[2]; /* NULL would mean the system's CA store */
    if (argc == 5) {            /* for a server with tls-auth-clients yes */
        node.tls_cert_file = argv[3];
        node.tls_key_file = argv[4];
    }
    /* Certificates are checked against the host of each node as the
     * cluster announces it (an IP address against the certificate's IP
     * entries); tls_server_name names one name for every node instead. */
    rc = rcp_cluster_open(&co, &cl, err, sizeof err);
    if (rc != RCP_OK) {
        /* e.g. "127.0.0.1:7000: TLS handshake failed: the server's
         * certificate did not verify: certificate has expired (...)" */
        fprintf(stderr, "open: %s: %s\n", rcp_err_name(rc), err);
        return 1;
    }
    r = rcp_cluster_command(cl, "SET %s %s", "greeting", "hello over TLS");
    rcp_reply_free(r);
    r = rcp_cluster_command(cl, "GET %s", "greeting");
    printf("%.*s\n", (int)r->len, r->str ? r->str : "");
    rcp_reply_free(r);
    rcp_cluster_close(cl);
    return 0;
}
