#!/bin/sh
# The certificates of the TLS tests, made afresh in DIR (P-256 keys: quick):
#   ca.pem/.key        the CA that signs the two below
#   server.pem/.key    the daemon's: SAN IP 127.0.0.1 and DNS localhost
#   client.pem/.key    a client's, CN "kerntune test client"
#   other_ca.pem/.key  a CA that signed neither (the wrong CA)
#   other_server.pem/.key  the daemon's renewed: as server.pem, signed by other_ca
# Valid for two days: the tests make them each run.
# usage: make_test_certs.sh DIR
set -eu
cd "$1"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }

ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
    -out "$1.pem"
}

# leaf NAME CN EXTENSIONS [CA]: a certificate signed by CA (default ca).
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "${4:-ca}.pem" -CAkey "${4:-ca}.key" -CAcreateserial \
    -days 2 -extfile "$1.ext" -out "$1.pem" 2> /dev/null
  rm "$1.csr" "$1.ext"
}

ca ca "kerntune test CA"
ca other_ca "kerntune other CA"
leaf server localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client "kerntune test client" "extendedKeyUsage=clientAuth"
leaf other_server localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth" other_ca
