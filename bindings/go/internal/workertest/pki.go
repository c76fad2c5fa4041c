package workertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Leaf is a certificate and its private key, as PEM and as files.
type Leaf struct {
	CertPEM, KeyPEM   []byte
	CertPath, KeyPath string
}

// PKI is a throwaway public-key infrastructure made for one test (nothing is committed): a CA;
// a leaf signed by it, valid for server and client authentication, with the subject-alternative
// names 127.0.0.1 and localhost; and an unrelated second CA with a leaf of the same shape.
// The files live in the test's temporary directory.
type PKI struct {
	CAPEM       []byte
	CAPath      string
	Leaf        Leaf
	OtherCAPEM  []byte
	OtherCAPath string
	OtherLeaf   Leaf
}

// NewPKI generates a PKI in t's temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	ca, other := NewCA(t, "wool-test-ca"), NewCA(t, "unrelated-ca")
	return &PKI{
		CAPEM:       ca.PEM,
		CAPath:      writeFile(t, dir, "ca.pem", ca.PEM),
		Leaf:        ca.NewLeaf(t, dir, "worker"),
		OtherCAPEM:  other.PEM,
		OtherCAPath: writeFile(t, dir, "other-ca.pem", other.PEM),
		OtherLeaf:   other.NewLeaf(t, dir, "other"),
	}
}

// CA is a throwaway certificate authority that signs leaves on demand (for tests that need
// several leaves of one CA, or several CAs, as a certificate rotation does).
type CA struct {
	// PEM is the CA's certificate.
	PEM  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA generates a CA whose certificate's common name is name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	cert, key, certPEM := newCA(t, name)
	return &CA{PEM: certPEM, cert: cert, key: key}
}

// NewLeaf signs a new leaf of the PKI's shape (server and client authentication, the
// subject-alternative names 127.0.0.1 and localhost), its files STEM-cert.pem and
// STEM-key.pem written in dir.
func (ca *CA) NewLeaf(t testing.TB, dir, stem string) Leaf {
	t.Helper()
	return newLeaf(t, ca.cert, ca.key, dir, stem)
}

// MutualArgs are wool-worker's flags for mutual TLS with this PKI's CA and leaf.
func (p *PKI) MutualArgs() []string {
	return []string{"--tls-ca", p.CAPath, "--tls-cert", p.Leaf.CertPath, "--tls-key", p.Leaf.KeyPath}
}

// OneWayArgs are wool-worker's flags for one-way TLS (clients present no certificate).
func (p *PKI) OneWayArgs() []string {
	return append(p.MutualArgs(), "--one-way")
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, dir, stem string) Leaf {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "wool-test-worker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return Leaf{
		CertPEM:  certPEM,
		KeyPEM:   keyPEM,
		CertPath: writeFile(t, dir, stem+"-cert.pem", certPEM),
		KeyPath:  writeFile(t, dir, stem+"-key.pem", keyPEM),
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n.Add(n, big.NewInt(1))
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
