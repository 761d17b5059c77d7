package talos

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
	"slices"
	"time"

	talosx509 "github.com/siderolabs/crypto/x509"
)

// tlsConfig is the per-handshake TLS configuration of an instance: a
// self-signed certificate and no client authentication in maintenance mode,
// a certificate from the machine CA and mandatory client certificates from
// that CA (or an accepted CA) when configured.
func (inst *instance) tlsConfig(*tls.ClientHelloInfo) (*tls.Config, error) {
	inst.certMu.Lock()
	defer inst.certMu.Unlock()

	if inst.serverTLS != nil {
		return inst.serverTLS, nil
	}

	if inst.maintenance {
		cert, err := selfSignedCert(inst.hostname, inst.sans)
		if err != nil {
			return nil, err
		}

		inst.serverTLS = &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"h2"},
			MinVersion:   tls.VersionTLS12,
		}

		return inst.serverTLS, nil
	}

	// A worker's config carries only the CA certificate: its apid gets its
	// certificate from trustd on a control plane, which has the key. Until a
	// control plane of the cluster was seen, the API cannot serve.
	caKey := inst.caKey
	if len(caKey) == 0 {
		inst.w.mu.Lock()
		caKey = inst.w.caKeys[string(inst.caCert)]
		inst.w.mu.Unlock()
	}

	if len(caKey) == 0 {
		return nil, errors.New("no certificate yet: the machine CA key is not known to any control plane")
	}

	cert, err := issueServerCert(inst.caCert, caKey, inst.hostname, inst.sans)
	if err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	for _, ca := range inst.clientCAs {
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("parsing a client CA certificate")
		}
	}

	inst.serverTLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	}

	return inst.serverTLS, nil
}

// issueServerCert signs a server certificate for the node with the CA.
func issueServerCert(caCertPEM, caKeyPEM []byte, hostname string, sans []string) (tls.Certificate, error) {
	ca := &talosx509.PEMEncodedCertificateAndKey{Crt: caCertPEM, Key: caKeyPEM}

	caCert, err := ca.GetCert()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parsing the machine CA certificate: %w", err)
	}

	caKey, err := ca.GetKey()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parsing the machine CA key: %w", err)
	}

	signer, ok := caKey.(crypto.Signer)
	if !ok {
		return tls.Certificate{}, fmt.Errorf("machine CA key of type %T cannot sign", caKey)
	}

	return newLeaf(caCert, signer, hostname, sans, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
}

// selfSignedCert is the certificate of a node in maintenance mode.
func selfSignedCert(hostname string, sans []string) (tls.Certificate, error) {
	return newLeaf(nil, nil, hostname, sans, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
}

// newLeaf creates a key and a certificate for it, signed by parent with
// parentKey, or self-signed when parent is nil.
func newLeaf(parent *x509.Certificate, parentKey crypto.Signer, cn string, sans []string, usage []x509.ExtKeyUsage) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating a key: %w", err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}

	for _, s := range slices.Compact(slices.Sorted(slices.Values(sans))) {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if s != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}

	if parent == nil {
		parent, parentKey = tmpl, key
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("signing a certificate: %w", err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// clientCert signs a client certificate with the CA in PEM form, for
// kubeconfigs.
func clientCert(caCertPEM, caKeyPEM []byte, cn string, orgs []string, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	ca := &talosx509.PEMEncodedCertificateAndKey{Crt: caCertPEM, Key: caKeyPEM}

	caCert, err := ca.GetCert()
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}

	caKey, err := ca.GetKey()
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA key: %w", err)
	}

	signer, ok := caKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("CA key of type %T cannot sign", caKey)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key: %w", err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a client certificate: %w", err)
	}

	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding a key: %w", err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serialNumber() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // the system's random source failed
	}

	return n
}
