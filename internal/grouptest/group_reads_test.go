package grouptest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// holdConn is the broker with two switches: changelog sends fail while
// failClog is set (its commits stay unconfirmed), and source polls wait
// while holdSrc is set (a new owner serves what it restored and nothing
// more).
type holdConn struct {
	*iggy.Client
	failClog, holdSrc atomic.Bool
}

func (h *holdConn) OpenSink(ctx context.Context, name string, partitions uint32) (connector.Sink, error) {
	sk, err := h.Client.OpenSink(ctx, name, partitions)
	if err != nil || !strings.Contains(name, "strand-changelog") {
		return sk, err
	}
	return &failingSink{Sink: sk.(*iggy.Sink), h: h}, nil
}

func (h *holdConn) OpenSource(ctx context.Context, name string) (connector.Source, error) {
	src, err := h.Client.OpenSource(ctx, name)
	if err != nil {
		return nil, err
	}
	return &holdSource{Source: src.(*iggy.Source), h: h}, nil
}

type failingSink struct {
	*iggy.Sink
	h *holdConn
}

func (s *failingSink) Send(ctx context.Context, msgs []connector.Message) error {
	if s.h.failClog.Load() {
		return errors.New("test: changelog sends fail")
	}
	return s.Sink.Send(ctx, msgs)
}

type holdSource struct {
	*iggy.Source
	h *holdConn
}

func (s *holdSource) Open(ctx context.Context, partition uint32, from uint64) (connector.PartitionReader, error) {
	rd, err := s.Source.Open(ctx, partition, from)
	if err != nil {
		return nil, err
	}
	return &holdReader{PartitionReader: rd, h: s.h}, nil
}

type holdReader struct {
	connector.PartitionReader
	h *holdConn
}

func (r *holdReader) Poll(ctx context.Context, max int) ([]connector.Record, error) {
	for r.h.holdSrc.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return r.PartitionReader.Poll(ctx, max)
}

// In a group, a read answers only from commits the partition's changelog
// has confirmed, so no key's value ever goes back across a failover
// (issue 24): an owner whose changelog sends fail keeps committing, but
// its reads of those commits are withheld; it leaves with them
// unconfirmed; the new owner restores only the confirmed ones and serves
// them (its source held, so it processes nothing more yet): every value it
// answers is at least the highest one the old owner ever answered. Then it
// processes the rest and every value is right.
func TestGroupReadsNeverGoBackAcrossAFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := Broker(t)
	const parts, keys = 2, 20
	if err := cl.EnsureTopic(ctx, "s", "log", parts); err != nil {
		t.Fatal(err)
	}
	topo, _, decl := Counter("grp")
	want := map[string]int64{}
	publishCounts(t, cl, decl, 1, 200, keys, want)

	start := func(name string, h *holdConn) *instance {
		t.Helper()
		topo, n, _ := Counter("grp")
		g := cl.Group("s", iggy.WithSessionTimeout(2*time.Second))
		app, err := topology.Open(ctx, topo, h, t.TempDir(), topology.WithGroup(g), topology.WithLogger(testLogger(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		in := &instance{name: name, app: app, n: n, stop: cancel, done: make(chan error, 1)}
		go func() { in.done <- app.Run(rctx) }()
		return in
	}
	_ = topo
	seen := map[string]int64{} // the highest value any read answered
	answered, withheld, recentWithheld := 0, 0, 0
	// readAll reads every key with GetRecent (the confirmed view, never
	// waits) and with Get (waits for the changelog); it returns Get's.
	readAll := func(in *instance) map[string]int64 {
		t.Helper()
		got := map[string]int64{}
		for k := range want {
			for _, recent := range []bool{true, false} {
				rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				var v int64
				var ok bool
				var err error
				if recent {
					v, ok, _, err = in.n.GetRecent(rctx, k)
				} else {
					v, ok, err = in.n.Get(rctx, k)
				}
				cancel()
				if err != nil {
					if recent {
						recentWithheld++
					} else {
						withheld++
					}
					continue
				}
				answered++
				if !ok {
					v = 0
				}
				if v < seen[k] {
					t.Errorf("key %s is %d on %s (recent %v), after a read answered %d", k, v, in.name, recent, seen[k])
				}
				seen[k] = max(seen[k], v)
				if !recent {
					got[k] = v
				}
			}
		}
		return got
	}

	ha := &holdConn{Client: cl}
	a := start("a", ha)
	settled(t, parts, a)
	readAll(a)

	// a's changelog stops confirming; it goes on committing.
	ha.failClog.Store(true)
	publishCounts(t, cl, decl, 201, 200, keys, want)
	waitUntil(t, "a to commit all 400 events", 30*time.Second, func() bool {
		var next uint64
		for p := range uint32(parts) {
			n, _, err := a.app.Checkpoint("s/log", p)
			if err != nil {
				t.Fatal(err)
			}
			next += n
		}
		return next == 400
	})
	readAll(a)
	t.Logf("old owner: %d reads answered, %d withheld (Get), %d withheld (GetRecent)", answered, withheld, recentWithheld)
	if recentWithheld > 0 {
		t.Errorf("%d GetRecent calls of the old owner failed: they answer the confirmed view without waiting", recentWithheld)
	}

	// b joins with its source held; a leaves with its last commits
	// unconfirmed: b gets both partitions and restores what was confirmed.
	hb := &holdConn{Client: cl}
	hb.holdSrc.Store(true)
	b := start("b", hb)
	a.close(t)
	waitUntil(t, "b to serve partitions 0 and 1", 30*time.Second, func() bool { return b.app.Phase(0) == topology.Serving && b.app.Phase(1) == topology.Serving })
	restored := readAll(b)
	behind := 0
	for k, v := range restored {
		if v < want[k] {
			behind++
		}
	}
	if behind == 0 {
		t.Fatalf("the new owner restored every key's final value %v: the old owner's last commits were confirmed after all, the test tested nothing", restored)
	}

	hb.holdSrc.Store(false)
	waitUntil(t, "b to catch up", 30*time.Second, func() bool { return caughtUp(b.app) })
	for k, v := range readAll(b) {
		if v != want[k] {
			t.Errorf("key %s = %d after the failover, want %d", k, v, want[k])
		}
	}
	b.close(t)
}
