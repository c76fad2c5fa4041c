#!/usr/bin/env bash
# Make throwaway TLS material for interop tests (never commit the output).
#
#   tests/interop/make-test-certs.sh OUTDIR
#
# Writes into OUTDIR (created if missing), all PEM, keys PKCS#8 EC P-256:
#   ca.pem ca.key             a test CA
#   worker.pem worker.key     signed by ca; SANs 127.0.0.1, ::1, localhost;
#                             usable as server AND client (serverAuth, clientAuth)
#   client.pem client.key     signed by ca; client only (clientAuth), CN=client
#   rogue-ca.pem rogue-ca.key another CA nobody trusts
#   rogue.pem rogue.key       signed by rogue-ca, same SANs/usages as worker.pem
# Prints OUTDIR on success.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
out="$1"
mkdir -p "$out"
cd "$out"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

make_ca() { # name
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/CN=libwool test $1" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$1.pem" 2>/dev/null
}

make_leaf() { # name ca cn usages san
    local name="$1" ca="$2" cn="$3" usages="$4" san="$5"
    key "$name.key"
    openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
    cat > "$name.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$usages
${san:+subjectAltName=$san}
EOF
    openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
        -sha256 -days 3650 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}

SAN="IP:127.0.0.1,IP:::1,DNS:localhost"
make_ca ca
make_ca rogue-ca
make_leaf worker ca localhost "serverAuth,clientAuth" "$SAN"
make_leaf client ca client "clientAuth" "DNS:client"
make_leaf rogue rogue-ca localhost "serverAuth,clientAuth" "$SAN"
rm -f ./*.srl
chmod 600 ./*.key
openssl verify -CAfile ca.pem worker.pem client.pem >/dev/null
pwd
