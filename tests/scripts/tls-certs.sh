#!/usr/bin/env bash
# Makes the TLS test certificates in DIR with the openssl command, at test
# time (no private key is committed):
#
#   ca.crt ca.key           the test CA
#   server.crt server.key   signed by it, for 127.0.0.1, ::1 and localhost
#   client.crt client.key   signed by it, a client certificate
#   other-ca.crt            a CA that signed nothing here ("wrong CA")
#   expired.crt expired.key signed by ca, for 127.0.0.1, valid only in 2020
#   wrongname.crt wrongname.key  signed by ca, for other.example only
#
# Usage: tls-certs.sh DIR      (DIR is created; existing files are kept)
set -euo pipefail

DIR=${1:?usage: tls-certs.sh DIR}
mkdir -p "$DIR"
cd "$DIR"
if [ -f wrongname.crt ]; then
    exit 0
fi
command -v openssl >/dev/null || { echo "tls-certs.sh: openssl not found" >&2; exit 1; }

# EC P-256 keys: fast to make, and every OpenSSL 3 speaks them.
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -days 30 -subj "/CN=rcpipe test CA" -out ca.crt 2>/dev/null
key other-ca.key
openssl req -x509 -new -key other-ca.key -days 30 -subj "/CN=rcpipe other CA" -out other-ca.crt 2>/dev/null
rm -f other-ca.key

# sign NAME CN SAN: NAME.key, NAME.crt signed by ca for 30 days.
sign() {
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}
sign server 127.0.0.1 "IP:127.0.0.1,IP:::1,DNS:localhost"
sign client "rcpipe test client" "DNS:rcpipe-client"
sign wrongname other.example "DNS:other.example"

# An expired certificate: openssl x509 cannot date one in the past, the
# ca command can.
key expired.key
openssl req -new -key expired.key -subj "/CN=127.0.0.1" -out expired.csr 2>/dev/null
mkdir -p ca-db
: > ca-db/index.txt
echo 01 > ca-db/serial
cat > ca-db/ca.cnf <<EOF
[ca]
default_ca = test
[test]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = ext
[any]
commonName = supplied
[ext]
subjectAltName = IP:127.0.0.1,DNS:localhost
EOF
openssl ca -batch -config ca-db/ca.cnf -cert ca.crt -keyfile ca.key -in expired.csr \
    -startdate 20200101000000Z -enddate 20200201000000Z -out expired.crt 2>/dev/null
rm -rf expired.csr ca-db
chmod 600 ./*.key
