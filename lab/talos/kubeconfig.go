package talos

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/siderolabs/talos/pkg/machinery/config"
)

// kubeconfigFile is the subset of the kubeconfig format an admin
// kubeconfig uses.
type kubeconfigFile struct {
	APIVersion     string              `yaml:"apiVersion"`
	Kind           string              `yaml:"kind"`
	Clusters       []kubeconfigCluster `yaml:"clusters"`
	Users          []kubeconfigUser    `yaml:"users"`
	Contexts       []kubeconfigContext `yaml:"contexts"`
	CurrentContext string              `yaml:"current-context"`
}

type kubeconfigCluster struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server                   string `yaml:"server"`
		CertificateAuthorityData string `yaml:"certificate-authority-data"`
	} `yaml:"cluster"`
}

type kubeconfigUser struct {
	Name string `yaml:"name"`
	User struct {
		ClientCertificateData string `yaml:"client-certificate-data"`
		ClientKeyData         string `yaml:"client-key-data"`
	} `yaml:"user"`
}

type kubeconfigContext struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster   string `yaml:"cluster"`
		Namespace string `yaml:"namespace"`
		User      string `yaml:"user"`
	} `yaml:"context"`
}

// adminKubeconfig is the kubeconfig Talos hands out (kubeconfig.GenerateAdmin):
// the cluster endpoint, the cluster's accepted CAs then its Kubernetes CA as
// the trusted server CAs, and a client certificate from the Kubernetes CA for
// cluster.adminKubeconfig's name and organisation (admin, system:masters),
// as user and context "admin@<cluster>".
func adminKubeconfig(cfg config.Provider) ([]byte, error) {
	cc := cfg.Cluster()

	ca := cc.IssuingCA()
	if ca == nil || len(ca.Crt) == 0 || len(ca.Key) == 0 {
		return nil, errors.New("the machine config has no Kubernetes CA key")
	}

	cn, org, lifetime := "admin", "system:masters", 365*24*time.Hour

	if ak := cc.AdminKubeconfig(); ak != nil {
		if ak.CommonName() != "" {
			cn = ak.CommonName()
		}

		if ak.CertOrganization() != "" {
			org = ak.CertOrganization()
		}

		if ak.CertLifetime() > 0 {
			lifetime = ak.CertLifetime()
		}
	}

	certPEM, keyPEM, err := clientCert(ca.Crt, ca.Key, cn, []string{org}, lifetime)
	if err != nil {
		return nil, err
	}

	name := cc.Name()
	user := "admin@" + name
	enc := base64.StdEncoding.EncodeToString

	var serverCAs []byte
	for _, accepted := range cc.AcceptedCAs() {
		serverCAs = append(serverCAs, accepted.Crt...)
	}

	serverCAs = append(serverCAs, ca.Crt...)

	var cl kubeconfigCluster
	cl.Name = name
	cl.Cluster.Server = cc.Endpoint().String()
	cl.Cluster.CertificateAuthorityData = enc(serverCAs)

	var u kubeconfigUser
	u.Name = user
	u.User.ClientCertificateData = enc(certPEM)
	u.User.ClientKeyData = enc(keyPEM)

	var ctx kubeconfigContext
	ctx.Name = user
	ctx.Context.Cluster = name
	ctx.Context.Namespace = "default"
	ctx.Context.User = user

	out, err := yaml.Marshal(kubeconfigFile{
		APIVersion:     "v1",
		Kind:           "Config",
		Clusters:       []kubeconfigCluster{cl},
		Users:          []kubeconfigUser{u},
		Contexts:       []kubeconfigContext{ctx},
		CurrentContext: user,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the kubeconfig: %w", err)
	}

	return out, nil
}

// kubeconfigArchive wraps the admin kubeconfig in a tar.gz holding the file
// "kubeconfig", as the Kubeconfig call streams it.
func kubeconfigArchive(cfg config.Provider) ([]byte, error) {
	data, err := adminKubeconfig(cfg)
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer

	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)

	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "kubeconfig",
		Size:     int64(len(data)),
		ModTime:  time.Now(),
		Mode:     0o600,
	}); err != nil {
		return nil, fmt.Errorf("writing the archive: %w", err)
	}

	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("writing the archive: %w", err)
	}

	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the archive: %w", err)
	}

	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("writing the archive: %w", err)
	}

	return buf.Bytes(), nil
}
