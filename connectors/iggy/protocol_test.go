package iggy

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// roundTripOn publishes and reads back through c, on topic s/t.
func roundTripOn(t *testing.T, c *Client) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	if err := c.EnsureTopic(ctx, "proto", "events", 2); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, c, "proto", "events")
	evs := []event{{Key: "k", Seq: 1}, {Key: "k", Seq: 2}, {Key: "k", Seq: 3}}
	if err := PublishBatch(ctx, p, eventEncoder{}, evs); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for part := range uint32(2) {
		tail, err := c.Tail(ctx, "proto", "events", part, 10)
		if err != nil {
			t.Fatal(err)
		}
		n += len(tail)
	}
	if n != len(evs) {
		t.Fatalf("read back %d messages, published %d", n, len(evs))
	}
}

func TestProtocolAutoDetectsEachServer(t *testing.T) {
	for _, c := range []struct {
		broker iggytest.Protocol
		want   Protocol
	}{{iggytest.Protocol08, Protocol08}, {iggytest.Protocol010, Protocol010}, {iggytest.ProtocolAuto, Protocol010}} {
		t.Run(c.broker.String(), func(t *testing.T) {
			tg := newTarget(t, iggytest.WithProtocol(c.broker))
			tg.faults(t)
			cl := tg.connect(t, WithProtocol(ProtocolAuto))
			if got := cl.Protocol(); got != c.want {
				t.Fatalf("detected %v on a %v broker, want %v", got, c.broker, c.want)
			}
			roundTripOn(t, cl)
		})
	}
}

func TestProtocolMismatchNamesBothVersions(t *testing.T) {
	t.Run("0.10 client, 0.8 server", func(t *testing.T) {
		tg := newTarget(t, iggytest.WithProtocol(iggytest.Protocol08))
		tg.faults(t)
		start := time.Now()
		_, err := Connect(context.Background(), tg.addr, tg.options(WithProtocol(Protocol010))...)
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "0.8") || !strings.Contains(err.Error(), "0.12.0") {
			t.Fatalf("got %v, want ErrIncompatible naming both versions", err)
		}
		if transient(err) {
			t.Fatal("a protocol mismatch is reported as transient")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the mismatch took %v to show", d)
		}
	})
	t.Run("0.8 client, 0.10 server", func(t *testing.T) {
		tg := newTarget(t, iggytest.WithProtocol(iggytest.Protocol010))
		tg.faults(t)
		_, err := Connect(context.Background(), tg.addr, tg.options(WithProtocol(Protocol08), WithCallTimeout(300*time.Millisecond))...)
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "0.8") || !strings.Contains(err.Error(), "0.12.0") {
			t.Fatalf("got %v, want ErrIncompatible naming both versions", err)
		}
	})
	t.Run("0.10 client, 0.9 server", func(t *testing.T) {
		// A server of another 0.1x protocol evicts the login, naming its
		// window; no such server runs here, so a listener plays one.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		defer ln.Close()
		wg.Go(func() {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			h := make([]byte, wire.HeaderSize)
			if _, err := io.ReadFull(nc, h); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, nc, int64(wire.FrameSize(h))-wire.HeaderSize); err != nil {
				return
			}
			e := wire.Eviction{Reason: wire.EvictIncompatibleProtocol, MaxVersion: 0x2C00, MinVersion: 0x2C00}
			e.Put(h)
			_, _ = nc.Write(h)
		})
		_, err = Connect(context.Background(), ln.Addr().String(), WithLogger(testLogger()), WithProtocol(Protocol010))
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "0.11.0") || !strings.Contains(err.Error(), "0.12.0") {
			t.Fatalf("got %v, want ErrIncompatible naming 0.11.0 and 0.12.0", err)
		}
	})
}

func TestParseProtocol(t *testing.T) {
	for s, want := range map[string]Protocol{"": ProtocolAuto, "auto": ProtocolAuto, "0.8": Protocol08, "0.10": Protocol010} {
		if got, err := ParseProtocol(s); err != nil || got != want {
			t.Fatalf("ParseProtocol(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseProtocol("0.9"); err == nil {
		t.Fatal("0.9 accepted")
	}
	if _, err := Connect(context.Background(), "127.0.0.1:1", WithProtocol(Protocol(9))); err == nil {
		t.Fatal("an unknown protocol was accepted")
	}
}
