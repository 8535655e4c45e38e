package iggytest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"
	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// client012 is a minimal binary protocol 0.12.0 client for the broker's
// tests, built on the wire package alone.
type client012 struct {
	t       *testing.T
	nc      net.Conn
	id      wire.ClientID
	session uint64
	request uint64
}

func dial012(t *testing.T, addr string) *client012 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &client012{t: t, nc: nc}
	c.id[0], c.id[15] = 7, 1
	return c
}

// roundTrip sends one request and returns the reply header (or the
// eviction) and body.
func (c *client012) roundTrip(op wire.Operation, code wire.Code, body []byte, ctx wire.PartitionContext) (wire.ReplyHeader, *wire.Eviction, []byte) {
	c.t.Helper()
	q := wire.RequestHeader{Size: uint32(wire.HeaderSize + len(body)), Client: c.id, Operation: op, Session: c.session, Code: code, Context: ctx}
	switch {
	case op == wire.OpRegister:
		q.Session = 0
	case op == wire.OpNonReplicated:
		q.Request = c.request
	default:
		c.request++
		q.Request = c.request
	}
	if op != wire.OpNonReplicated && op != wire.OpSendMessages {
		q.RequestChecksum = wire.BodyChecksum(body)
	}
	f := make([]byte, wire.HeaderSize, wire.HeaderSize+len(body))
	q.Put(f)
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(append(f, body...)); err != nil {
		c.t.Fatal(err)
	}
	return c.read()
}

func (c *client012) read() (wire.ReplyHeader, *wire.Eviction, []byte) {
	c.t.Helper()
	h := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(c.nc, h); err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	if wire.FrameCommand(h) == wire.CommandEviction {
		e, err := wire.ParseEviction(h)
		if err != nil {
			c.t.Fatal(err)
		}
		return wire.ReplyHeader{}, &e, nil
	}
	rh, err := wire.ParseReplyHeader(h)
	if err != nil {
		c.t.Fatal(err)
	}
	body := make([]byte, rh.Size-wire.HeaderSize)
	if _, err := io.ReadFull(c.nc, body); err != nil {
		c.t.Fatal(err)
	}
	return rh, nil, body
}

func (c *client012) login(user, pass string) (*wire.Eviction, wire.RegisterReply) {
	c.t.Helper()
	g := wire.Register{Version: wire.ProtocolVersion, SDKName: "strand-test", SDKVersion: "0", User: user, Password: pass}
	rh, ev, body := c.roundTrip(wire.OpRegister, 0, g.Append(nil), wire.PartitionContext{})
	if ev != nil {
		return ev, wire.RegisterReply{}
	}
	rep, err := wire.ParseRegisterReply(body)
	if err != nil || rh.Status != 0 {
		c.t.Fatalf("register reply: %v status %d", err, rh.Status)
	}
	c.session = rep.Session
	return nil, rep
}

// framed runs a metadata operation and returns its payload, failing the
// test on any rejection.
func (c *client012) framed(op wire.Operation, body []byte) []byte {
	c.t.Helper()
	p, st := c.framedStatus(op, body)
	if st != 0 {
		c.t.Fatalf("operation %d: status %d", op, st)
	}
	return p
}

func (c *client012) framedStatus(op wire.Operation, body []byte) ([]byte, wire.Status) {
	c.t.Helper()
	rh, ev, b := c.roundTrip(op, 0, body, wire.PartitionContext{})
	if ev != nil {
		c.t.Fatalf("operation %d: %v", op, ev)
	}
	if rh.Status != 0 {
		return nil, rh.Status
	}
	p, st, err := wire.ParseResult(b)
	if err != nil {
		c.t.Fatal(err)
	}
	return p, st
}

func (c *client012) read012(code wire.Code, body []byte) ([]byte, wire.Status) {
	c.t.Helper()
	rh, ev, b := c.roundTrip(wire.OpNonReplicated, code, body, wire.PartitionContext{})
	if ev != nil {
		c.t.Fatalf("code %d: %v", code, ev)
	}
	return b, rh.Status
}

func named(t *testing.T, s string) wire.Identifier {
	id, err := wire.NamedID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func sendBody(t *testing.T, stream, topic string, part uint32, payloads ...string) []byte {
	ids := named(t, topic).Append(named(t, stream).Append(nil))
	b := wire.AppendSendHead(nil, ids, part, len(payloads))
	b, start := wire.BeginBatch(b)
	for i, p := range payloads {
		var id [16]byte
		id[0] = byte(i + 1)
		b = wire.AppendFrame(b, &id, uint32(i), uint32(i), []byte(p), nil)
	}
	wire.FinishBatch(b, start, 1767225600000000, uint32(len(payloads)))
	return b
}

func TestBroker012Session(t *testing.T) {
	srv := startServer(t)
	c := dial012(t, srv.Addr())
	// Ping works before login; a read does not.
	if _, st := c.read012(wire.CodePing, nil); st != 0 {
		t.Fatalf("ping: %d", st)
	}
	if _, st := c.read012(wire.CodeGetStreams, nil); st != wire.StatusUnauthenticated {
		t.Fatalf("read before login: status %d, want 40", st)
	}
	if ev, rep := c.login("iggy", "iggy"); ev != nil || rep.Session == 0 || rep.ServerVersion != wire.ProtocolVersion {
		t.Fatalf("login: %v %+v", ev, rep)
	}
	b, st := c.read012(wire.CodeGetClusterMetadata, nil)
	_, nodes, err := wire.ParseClusterMetadata(b)
	if st != 0 || err != nil || len(nodes) != 1 || nodes[0].Role != 0 {
		t.Fatalf("cluster metadata: %d %v %+v", st, err, nodes)
	}

	bad := dial012(t, srv.Addr())
	if ev, _ := bad.login("iggy", "wrong"); ev == nil || ev.Reason != wire.EvictInvalidCredentials {
		t.Fatalf("wrong password: %v", ev)
	}
	old := dial012(t, srv.Addr())
	g := wire.Register{Version: 0x2C00, User: "iggy", Password: "iggy"}
	_, ev, _ := old.roundTrip(wire.OpRegister, 0, g.Append(nil), wire.PartitionContext{})
	if ev == nil || ev.Reason != wire.EvictIncompatibleProtocol || ev.MaxVersion != wire.ProtocolVersion ||
		!strings.Contains(ev.Error(), "0.12.0") {
		t.Fatalf("old version: %v", ev)
	}
}

func TestBroker012Messages(t *testing.T) {
	srv := startServer(t)
	scenario012Messages(t, srv.Addr(), "iggy", "iggy", "orders", true)
}

// TestScenarios012RealServer runs the 0.10 scenarios against a real Iggy
// 0.10 server when STRAND_IGGY_ADDR is set and STRAND_IGGY_PROTOCOL is
// 0.10; otherwise it skips.
func TestScenarios012RealServer(t *testing.T) {
	if os.Getenv("STRAND_IGGY_PROTOCOL") != "0.10" {
		t.Skip("STRAND_IGGY_PROTOCOL is not 0.10")
	}
	tg := realTarget(t)
	stream := fmt.Sprintf("strand-012-%d", time.Now().UnixNano())
	scenario012Messages(t, tg.addr, tg.user, tg.pass, stream, false)
	c := dial012(t, tg.addr)
	c.login(tg.user, tg.pass)
	c.framed(wire.OpDeleteStream, named(t, stream).Append(nil))
}

// scenario012Messages creates stream/events, sends, retries, polls and
// stores offsets through a 0.10 client. embedded enables the checks of
// the broker's own choices (the incarnation it reports).
func scenario012Messages(t *testing.T, addr, user, pass, stream string, embedded bool) {
	c := dial012(t, addr)
	if ev, _ := c.login(user, pass); ev != nil {
		t.Fatal(ev)
	}
	si, ok, err := wire.ParseStream(c.framed(wire.OpCreateStream, wire.CreateStream{Name: stream}.Append(nil, wire.V012)), wire.V012)
	if err != nil || !ok || si.Name != stream {
		t.Fatal(si, err)
	}
	if _, st := c.framedStatus(wire.OpCreateStream, wire.CreateStream{Name: stream}.Append(nil, wire.V012)); st != wire.StatusStreamNameExists {
		t.Fatalf("duplicate stream: %d", st)
	}
	ct := wire.CreateTopic{Stream: named(t, stream), Partitions: 2, Name: "events", Expiry: 3_600_000_000}
	ti, ok, err := wire.ParseTopic(c.framed(wire.OpCreateTopic, ct.Append(nil, wire.V012)), wire.V012)
	if err != nil || !ok || len(ti.Partitions) != 2 || ti.Expiry != 3_600_000_000 || embedded && ti.Partitions[1].Context.Incarnation == 0 {
		t.Fatalf("create topic: %+v %v", ti, err)
	}
	route, st := c.read012(wire.CodeGetPartitionRoute, wire.PartitionRoute{Stream: named(t, stream), Topic: named(t, "events"), Partition: 1}.Append(nil))
	ctx, err := wire.ParsePartitionContext(route[:min(len(route), wire.PartitionContextSize)])
	if st != 0 || err != nil || embedded && ctx.Incarnation != ti.Partitions[1].Context.Incarnation {
		t.Fatalf("route: %d %v %+v", st, err, ctx)
	}

	// Two sends: confirmations give each batch's base offset.
	for i, want := range []uint64{0, 2} {
		rh, ev, b := c.roundTrip(wire.OpSendMessages, 0, sendBody(t, stream, "events", 1, "a", "b"), ctx)
		cs, err := wire.ParseConfirmations(b)
		if ev != nil || rh.Status != 0 || err != nil || len(cs) != 1 || cs[0].BaseOffset != want || cs[0].Partition != 1 {
			t.Fatalf("send %d: %v %d %v %+v", i, ev, rh.Status, err, cs)
		}
	}
	// A retry of the last request number is recognised: empty success.
	c.request--
	rh, _, b := c.roundTrip(wire.OpSendMessages, 0, sendBody(t, stream, "events", 1, "a", "b"), ctx)
	if rh.Status != 0 || len(b) != 0 {
		t.Fatalf("retry: status %d body %x", rh.Status, b)
	}
	// A stale context (partition re-created) is refused.
	stale := ctx
	stale.Incarnation++
	if rh, _, _ := c.roundTrip(wire.OpSendMessages, 0, sendBody(t, stream, "events", 1, "x"), stale); rh.Status != wire.StatusHistoryUnavailable {
		t.Fatalf("stale context: status %d", rh.Status)
	}
	// A corrupted frame is refused with the frame checksum status.
	corrupt := sendBody(t, stream, "events", 1, "x")
	corrupt[len(corrupt)-1] ^= 1
	if rh, _, _ := c.roundTrip(wire.OpSendMessages, 0, corrupt, ctx); rh.Status != wire.StatusInvalidMessageChecksum {
		t.Fatalf("corrupt frame: status %d", rh.Status)
	}

	part := uint32(1)
	poll := wire.Poll{Consumer: wire.Consumer{Kind: wire.ConsumerSingle, ID: wire.NumericID(1)}, Stream: named(t, stream), Topic: named(t, "events"),
		Partition: &part, Strategy: wire.PollOffset, Value: 1, Count: 10}
	b, st = c.read012(wire.CodePollMessages, poll.Append(nil))
	pre, _, batches, err := wire.ParsePollReply(b)
	if st != 0 || err != nil || pre.Count != 3 || pre.CurrentOffset != 3 {
		t.Fatalf("poll: %d %v %+v", st, err, pre)
	}
	var got []string
	for len(batches) > 0 {
		if err := wire.VerifyBatch(batches); err != nil {
			t.Fatal(err)
		}
		h, err := wire.Frames(batches, func(h *wire.BatchHeader, f *wire.Frame) error {
			got = append(got, string(f.Payload))
			if h.BaseOffset+uint64(f.OffsetDelta) != uint64(len(got)) {
				t.Fatalf("frame %q at offset %d", f.Payload, h.BaseOffset+uint64(f.OffsetDelta))
			}
			return nil
		})
		if err != nil || h.PartitionID != 1 || h.BaseTimestamp == 0 {
			t.Fatalf("batch %+v: %v", h, err)
		}
		batches = batches[h.Length:]
	}
	if strings.Join(got, "") != "bab" {
		t.Fatalf("polled %q", got)
	}

	so := wire.StoreOffset{OffsetRef: wire.OffsetRef{Consumer: poll.Consumer, Stream: poll.Stream, Topic: poll.Topic, Partition: &part}, Offset: 2}
	rh, _, b = c.roundTrip(wire.OpStoreOffset, 0, so.Append(nil, wire.V012), ctx)
	if _, st, err := wire.ParseResult(b); rh.Status != 0 || st != 0 || err != nil {
		t.Fatalf("store offset: %d %d %v", rh.Status, st, err)
	}
	b, _ = c.read012(wire.CodeGetConsumerOffset, so.OffsetRef.Append(nil))
	if oi, ok, err := wire.ParseOffsetInfo(b); err != nil || !ok || oi.StoredOffset != 2 {
		t.Fatalf("offset: %+v %v", oi, err)
	}

	if !embedded {
		return
	}
	// A 0.8 client on the same listener sees what the 0.10 client wrote.
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if _, err := sdk.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
	sid, _ := iggcon.NewIdentifier(stream)
	tid, _ := iggcon.NewIdentifier("events")
	pm, err := sdk.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(0), 10, false, &part)
	if err != nil || len(pm.Messages) != 4 || string(pm.Messages[3].Payload) != "b" || pm.Messages[1].Header.OriginTimestamp != 1767225600000001 {
		t.Fatalf("0.8 poll: %v %+v", err, pm)
	}
}

func TestBroker012ProtocolSelection(t *testing.T) {
	// A 0.8-only listener answers a 0.10 request as a 0.8 server does:
	// legacy InvalidCommand replies, which a 0.10 client recognises by
	// their non-zero first bytes.
	srv08 := startServer(t, WithProtocol(Protocol08))
	c := dial012(t, srv08.Addr())
	g := wire.Register{Version: wire.ProtocolVersion, User: "iggy", Password: "iggy"}
	f := make([]byte, wire.HeaderSize)
	body := g.Append(nil)
	(&wire.RequestHeader{Size: uint32(wire.HeaderSize + len(body)), Client: c.id, Operation: wire.OpRegister}).Put(f)
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(append(f, body...)); err != nil {
		t.Fatal(err)
	}
	var first [8]byte
	if _, err := io.ReadFull(c.nc, first[:]); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(first[:]) != StatusInvalidCommand {
		t.Fatalf("0.8 listener answered %x", first)
	}

	// A 0.10-only listener does not answer a 0.8 client: its login frame
	// is shorter than a header, then the connection closes.
	srv10 := startServer(t, WithProtocol(Protocol010))
	nc, err := net.Dial("tcp", srv10.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lb, code := (&wire.Login{User: "iggy", Password: "iggy"}).AppendLegacy(nil)
	frame := wire.AppendLegacyRequest(nil, code, lb)
	frame = append(frame, make([]byte, wire.HeaderSize)...) // a stream of further requests
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := nc.Read(first[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("0.10 listener answered a 0.8 client: %d bytes, %v", n, err)
	}

	// Auto: both on one listener.
	auto := startServer(t)
	c = dial012(t, auto.Addr())
	if ev, _ := c.login("iggy", "iggy"); ev != nil {
		t.Fatal(ev)
	}
	sdk, err := tcp.NewIggyTcpClient(tcp.WithServerAddress(auto.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	if _, err := sdk.LoginUser("iggy", "iggy"); err != nil {
		t.Fatal(err)
	}
}

func startServer(t *testing.T, opts ...Option) *Server {
	t.Helper()
	srv, err := NewServer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}
