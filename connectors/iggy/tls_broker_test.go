package iggy

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// TestTLSEndToEndAgainstTheBrokersListener runs the connector's WithTLS
// path against the embedded broker's own TLS listener (no proxy): connect,
// publish, read back, and the failures a misconfigured client meets.
func TestTLSEndToEndAgainstTheBrokersListener(t *testing.T) {
	cert, key, err := iggytest.WriteSelfSignedCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := iggytest.NewServer(iggytest.WithTLS(cert, key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	tg := &target{addr: srv.Addr(), user: "iggy", pass: "iggy", srv: srv}
	_, port, _ := net.SplitHostPort(srv.Addr())

	c, err := Connect(ctxT(t, 10*time.Second), "localhost:"+port, tg.options(WithTLS(WithTLSCAFile(cert)))...)
	if err != nil {
		t.Fatalf("Connect over TLS: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	const keys, total, parts = 10, 500, 2
	s, topic := tg.topic(t, c, parts)
	p, err := NewPublisher(ctxT(t, 10*time.Second), c, s, topic, WithConnections(2))
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, p, keys, total, 2)
	if err := p.Close(ctxT(t, 30*time.Second)); err != nil {
		t.Fatalf("close publisher: %v", err)
	}
	src, err := NewSource(c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	consumeAll(t, src, parts, total).check(t, src, keys, total)

	// The IP address is in the certificate too.
	c2, err := Connect(ctxT(t, 10*time.Second), srv.Addr(), tg.options(WithTLS(WithTLSCAFile(cert)))...)
	if err != nil {
		t.Fatalf("Connect over TLS by IP: %v", err)
	}
	c2.Close()
	// Reconnects after a drop go through TLS again.
	srv.DropConnections()
	if err := Publish(ctxT(t, 10*time.Second), newPublisher(t, c, s, topic), eventEncoder{}, event{Key: "after-drop"}); err != nil {
		t.Fatalf("publish after a drop: %v", err)
	}

	for name, opts := range map[string][]Option{
		"untrusted certificate": tg.options(WithTLS()),
		"wrong server name":     tg.options(WithTLS(WithTLSCAFile(cert), WithTLSServerName("not-the-broker.example"))),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Connect(ctxT(t, 10*time.Second), "localhost:"+port, opts...)
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("got %v, want ErrUnreachable", err)
			}
		})
	}
	// A plain client cannot talk to the TLS listener.
	_, err = Connect(ctxT(t, 3*time.Second), srv.Addr(), tg.options(WithDialTimeout(time.Second))...)
	if err == nil {
		t.Fatal("a plain-TCP client was served by the TLS listener")
	}
}
