package iggy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tlsProxy terminates TLS with a self-signed certificate for "localhost"
// and forwards to backend. It returns its address and the CA file.
func tlsProxy(t *testing.T, backend string) (addr, caFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			front, err := ln.Accept()
			if err != nil {
				return
			}
			back, err := net.Dial("tcp", backend)
			if err != nil {
				front.Close()
				continue
			}
			track(front)
			track(back)
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(back, front); back.Close() }()
			go func() { defer wg.Done(); io.Copy(front, back); front.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), caFile
}

func TestTLSConnectionThroughTheSDK(t *testing.T) {
	tg := newTarget(t)
	tg.faults(t)
	addr, ca := tlsProxy(t, tg.addr)
	_, port, _ := net.SplitHostPort(addr)
	c, err := Connect(ctxT(t, 10*time.Second), "localhost:"+port,
		append(tg.options(), WithTLS(WithTLSCAFile(ca)))...)
	if err != nil {
		t.Fatalf("Connect over TLS: %v", err)
	}
	defer c.Close()
	s, topic := tg.topic(t, c, 2)
	p := newPublisher(t, c, s, topic)
	if err := Publish(ctxT(t, 10*time.Second), p, eventEncoder{}, event{Key: "k"}); err != nil {
		t.Fatalf("publish over TLS: %v", err)
	}
	// The server name can be given when the address has none.
	c2, err := Connect(ctxT(t, 10*time.Second), addr, append(tg.options(), WithTLS(WithTLSCAFile(ca), WithTLSServerName("localhost")))...)
	if err != nil {
		t.Fatalf("Connect with TLSServerName: %v", err)
	}
	c2.Close()
	c3, err := Connect(ctxT(t, 10*time.Second), addr, append(tg.options(), WithTLS(WithTLSInsecureSkipVerify()))...)
	if err != nil {
		t.Fatalf("Connect skipping verification: %v", err)
	}
	c3.Close()
}

func TestTLSFailuresAreReportedNotRetriedForever(t *testing.T) {
	tg := newTarget(t)
	tg.faults(t)
	addr, _ := tlsProxy(t, tg.addr)
	_, port, _ := net.SplitHostPort(addr)
	for name, tc := range map[string]struct {
		addr string
		opt  Option
	}{
		"unknown certificate authority": {"localhost:" + port, WithTLS()},
		"plain server":                  {tg.addr, WithTLS(WithTLSInsecureSkipVerify())},
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := Connect(ctxT(t, 10*time.Second), tc.addr, append(tg.options(), tc.opt)...)
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("got %v, want ErrUnreachable", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v", d)
			}
			t.Log(err)
		})
	}
	missing := filepath.Join(t.TempDir(), "none.pem")
	_, err := Connect(ctxT(t, 10*time.Second), addr, append(tg.options(), WithTLS(WithTLSCAFile(missing)))...)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing CA file: got %v, want an error naming the file", err)
	}
}
