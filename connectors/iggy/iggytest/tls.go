package iggytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"

	"github.com/strand-io/strand/internal/strerr"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// WithTLS makes the broker's listener speak TLS (server 0.8.0's
// tcp.tls.enabled with cert_file and key_file): certFile and keyFile are
// PEM files, read when the server starts (an unreadable pair fails
// NewServer). The handshake runs on the connection's own goroutine, so a
// client that never completes it holds no other connection up. Clients use
// the SDK's tcp.WithTLS; for tests, WriteSelfSignedCert makes a pair.
func WithTLS(certFile, keyFile string) Option {
	return optionFunc(func(c *config) { c.certFile, c.keyFile = certFile, keyFile })
}

func (cfg *config) tlsConfig() (*tls.Config, error) {
	if cfg.certFile == "" && cfg.keyFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.certFile, cfg.keyFile)
	if err != nil {
		return nil, strerr.Errorf("strand: iggytest: TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// WriteSelfSignedCert writes a fresh self-signed certificate and its key to
// cert.pem and key.pem in dir and returns their paths. The certificate is
// its own certificate authority, valid for a day, for "localhost",
// 127.0.0.1 and ::1 plus any extra host names or IP addresses in hosts: a
// client that trusts certFile (the SDK's tcp.WithTLSCAFile) can verify the
// broker. It is meant for tests, not for production.
func WriteSelfSignedCert(dir string, hosts ...string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "iggytest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        true, BasicConstraintsValid: true,
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
