package iggy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

func TestMain(m *testing.M) {
	// The SDK prints a few lines per login through package log; keep test
	// output readable. This process is ours to configure.
	RouteStdLog(testLogger())
	testrun.Verify(m)
}

// testLogger discards unless STRAND_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("STRAND_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// target is where a test runs: the embedded broker, or the real server named
// by STRAND_IGGY_ADDR (with STRAND_IGGY_USER / STRAND_IGGY_PASSWORD,
// default iggy/iggy). Tests that need fault injection skip on a real server.
type target struct {
	addr       string
	user, pass string
	srv        *iggytest.Server
}

func newTarget(t testing.TB, opts ...iggytest.Option) *target {
	t.Helper()
	if addr := os.Getenv("STRAND_IGGY_ADDR"); addr != "" {
		tg := &target{addr: addr, user: os.Getenv("STRAND_IGGY_USER"), pass: os.Getenv("STRAND_IGGY_PASSWORD")}
		if tg.user == "" {
			tg.user, tg.pass = "iggy", "iggy"
		}
		return tg
	}
	srv, err := iggytest.NewServer(opts...)
	if err != nil {
		t.Fatalf("start embedded broker: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return &target{addr: srv.Addr(), user: "iggy", pass: "iggy", srv: srv}
}

// faults returns the embedded broker, skipping the test on a real server.
func (tg *target) faults(t testing.TB) *iggytest.Server {
	t.Helper()
	if tg.srv == nil {
		t.Skip("needs the embedded broker's fault injection")
	}
	return tg.srv
}

// sdk08 skips a test that drives the server with the official SDK v0.8.0
// when the server is a real one that speaks Iggy 0.10 (the embedded broker
// speaks both).
func (tg *target) sdk08(t testing.TB) {
	t.Helper()
	if tg.srv == nil && testProtocol() == Protocol010 {
		t.Skip("uses the SDK v0.8.0, which a real Iggy 0.10 server does not speak")
	}
}

func (tg *target) options(extra ...Option) []Option {
	return append([]Option{WithCredentials(tg.user, tg.pass), WithLogger(testLogger()),
		WithBackoff(5*time.Millisecond, 200*time.Millisecond), WithDialTimeout(2 * time.Second), WithProtocol(testProtocol())}, extra...)
}

// testProtocol is the protocol the tests' clients speak: the
// STRAND_IGGY_PROTOCOL variable ("0.10", "0.8" or "auto", the default).
// The embedded broker speaks both on one listener, so tests that also use
// the official SDK v0.8.0 directly run in every mode.
func testProtocol() Protocol {
	p, err := ParseProtocol(os.Getenv("STRAND_IGGY_PROTOCOL"))
	if err != nil {
		panic(err)
	}
	return p
}

// connect connects and closes at cleanup.
func (tg *target) connect(t testing.TB, extra ...Option) *Client {
	t.Helper()
	c, err := Connect(context.Background(), tg.addr, tg.options(extra...)...)
	if err != nil {
		t.Fatalf("Connect(%s): %v", tg.addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// topic creates a fresh stream with one topic of n partitions and deletes
// the stream at cleanup (so a shared real server stays clean).
func (tg *target) topic(t testing.TB, c *Client, n uint32) (streamName, topicName string) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	streamName, topicName = "strand-test-"+name+"-"+hex.EncodeToString(b[:]), "events"
	ctx := context.Background()
	if err := c.EnsureTopic(ctx, streamName, topicName, n); err != nil {
		t.Fatalf("EnsureTopic: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.DeleteStream(ctx, streamName)
	})
	return streamName, topicName
}

// event is the test event: a key, a per-key sequence number and some body.
type event struct {
	Key  string `json:"key"`
	Seq  uint64 `json:"seq"`
	Body string `json:"body,omitempty"`
}

// eventEncoder writes events as JSON with tag 7, Relaxed, and the sequence
// number in the strand-seq header.
type eventEncoder struct{}

func (eventEncoder) Envelope(e event) (stream.Envelope, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return stream.Envelope{}, err
	}
	return stream.Envelope{
		Headers: connector.Headers{Key: []byte(e.Key), Tag: 7, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative, Seq: e.Seq, HasSeq: true},
		Payload: b,
	}, nil
}

// sized is a test's size: normal in the default run, soak with STRAND_SOAK
// set (crashtest.Soak), so the default run stays short and the full
// length is kept for soaks.
func sized(normal, soak int) int {
	if crashtest.Soak() {
		return soak
	}
	return normal
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
