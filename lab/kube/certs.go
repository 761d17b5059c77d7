package kube

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// NewCA creates a self-signed certificate authority in PEM form (an ECDSA
// P-256 key, as Talos generates for a cluster's Kubernetes CA), for tests
// and lab clusters that have no secrets bundle of their own.
func NewCA(commonName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"kubernetes"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ClientCert issues a client certificate signed by the CA in caCert and caKey
// (PEM) for user, with groups as its organizations, the way kube-apiserver
// reads a client certificate's identity. The group system:masters makes the
// user a cluster administrator on a real server.
func ClientCert(caCert, caKey []byte, user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	ca, signer, err := parseCA(caCert, caKey)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return issue(ca, signer, tmpl)
}

// ServingCert issues a server certificate signed by the CA in caCert and
// caKey (PEM) for the given IP addresses and DNS names.
func ServingCert(caCert, caKey []byte, hosts ...string) (certPEM, keyPEM []byte, err error) {
	ca, signer, err := parseCA(caCert, caKey)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return issue(ca, signer, tmpl)
}

func issue(ca *x509.Certificate, signer crypto.Signer, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}
	tmpl.SerialNumber = serialNumber()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(365 * 24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// parseCA reads a CA certificate and its private key from PEM. The key may
// be PKCS #1 (RSA), SEC 1 (EC) or PKCS #8 (any, including the "ED25519
// PRIVATE KEY" blocks that Talos writes).
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("reading the CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New("parsing the CA certificate: not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, errors.New("reading the CA key: no PEM block")
	}
	var key any
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA key (%s): %w", kb.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("parsing the CA key: %T cannot sign", key)
	}
	return cert, signer, nil
}

// serverTLS builds the server side of the emulator's TLS: a serving
// certificate for hosts signed by the CA, and client certificates requested
// but checked per request, so that a missing or foreign certificate gets a
// 401 response as from kube-apiserver rather than a failed handshake.
func serverTLS(caCert, caKey []byte, hosts ...string) (*tls.Config, *x509.CertPool, error) {
	ca, _, err := parseCA(caCert, caKey)
	if err != nil {
		return nil, nil, err
	}
	certPEM, keyPEM, err := ServingCert(caCert, caKey, hosts...)
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequestClientCert,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, pool, nil
}

// verifyClient returns the user name and groups of a client certificate
// chain signed by the CA in pool.
func verifyClient(pool *x509.CertPool, chain []*x509.Certificate) (user string, groups []string, err error) {
	if len(chain) == 0 {
		return "", nil, errors.New("no client certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return "", nil, fmt.Errorf("verifying the client certificate: %w", err)
	}
	return chain[0].Subject.CommonName, chain[0].Subject.Organization, nil
}

func serialNumber() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("reading the system's random source: %v", err))
	}
	return n
}
