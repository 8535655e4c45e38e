package iggytest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/apache/iggy/foreign/go/client"
	"github.com/apache/iggy/foreign/go/client/tcp"
	iggcon "github.com/apache/iggy/foreign/go/contracts"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

func TestMain(m *testing.M) {
	if code, ok := crashtest.Main(map[string]func([]string) int{childRole: runChild}); ok {
		os.Exit(code)
	}
	// The SDK logs three lines per login through the standard logger.
	log.SetOutput(io.Discard)
	testrun.Verify(m)
}

// target is where a scenario runs: the embedded broker (srv set) or a real
// Iggy 0.8 server reached through STRAND_IGGY_ADDR.
type target struct {
	addr, user, pass string
	srv              *Server
}

func (tg target) embedded() bool { return tg.srv != nil }

// connect returns an SDK client that is not logged in.
func (tg target) connect(t testing.TB) iggcon.Client {
	t.Helper()
	cli, err := client.NewIggyClient(client.WithTcp(tcp.WithServerAddress(tg.addr)))
	if err != nil {
		t.Fatalf("connect to %s: %v", tg.addr, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// login returns a logged-in SDK client.
func (tg target) login(t testing.TB) iggcon.Client {
	t.Helper()
	cli := tg.connect(t)
	if _, err := cli.LoginUser(tg.user, tg.pass); err != nil {
		t.Fatalf("login as %q: %v", tg.user, err)
	}
	return cli
}

// uniqueName returns a name no other test run uses, so that scenarios can
// run against a shared real server.
func uniqueName(t testing.TB, what string) string {
	base := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	if len(base) > 60 {
		base = base[len(base)-60:]
	}
	return fmt.Sprintf("%s-%s-%08x", base, what, rand.Uint32())
}

// newStream creates a uniquely named stream, deleted when the test ends.
func (tg target) newStream(t testing.TB, cli iggcon.Client) (string, iggcon.Identifier) {
	t.Helper()
	name := uniqueName(t, "s")
	if _, err := cli.CreateStream(name); err != nil {
		t.Fatalf("create stream %q: %v", name, err)
	}
	id := mustID(name)
	t.Cleanup(func() {
		admin := tg.login(t)
		_ = admin.DeleteStream(id)
	})
	return name, id
}

// newTopic creates a stream and a topic with n partitions in it.
func (tg target) newTopic(t testing.TB, cli iggcon.Client, n uint32) (iggcon.Identifier, iggcon.Identifier) {
	t.Helper()
	_, sid := tg.newStream(t, cli)
	name := uniqueName(t, "t")
	if _, err := cli.CreateTopic(sid, name, n, iggcon.CompressionAlgorithmNone, 0, 0, nil); err != nil {
		t.Fatalf("create topic %q: %v", name, err)
	}
	return sid, mustID(name)
}

func mustID[T uint32 | string](v T) iggcon.Identifier {
	id, err := iggcon.NewIdentifier(v)
	if err != nil {
		panic(err)
	}
	return id
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

// msgs builds n messages with payload prefix-i.
func msgs(t testing.TB, prefix string, n int, opts ...iggcon.IggyMessageOpt) []iggcon.IggyMessage {
	t.Helper()
	out := make([]iggcon.IggyMessage, n)
	for i := range out {
		m, err := iggcon.NewIggyMessage([]byte(fmt.Sprintf("%s-%d", prefix, i)), opts...)
		must(t, err)
		out[i] = m
	}
	return out
}

func payloads(pm *iggcon.PolledMessage) []string {
	var out []string
	for _, m := range pm.Messages {
		out = append(out, string(m.Payload))
	}
	return out
}

func offsets(pm *iggcon.PolledMessage) []uint64 {
	var out []uint64
	for _, m := range pm.Messages {
		out = append(out, m.Header.Offset)
	}
	return out
}

func u32p(v uint32) *uint32 { return &v }

// embeddedTarget starts a fresh in-memory broker for one test.
func embeddedTarget(t testing.TB, opts ...Option) target {
	t.Helper()
	srv, err := NewServer(opts...)
	must(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return target{addr: srv.Addr(), user: "iggy", pass: "iggy", srv: srv}
}

// realTarget returns the real server named by STRAND_IGGY_ADDR, or skips.
func realTarget(t testing.TB) target {
	addr := os.Getenv("STRAND_IGGY_ADDR")
	if addr == "" {
		t.Skip("STRAND_IGGY_ADDR not set: no real Iggy 0.8 server to compare with")
	}
	tg := target{addr: addr, user: os.Getenv("STRAND_IGGY_USER"), pass: os.Getenv("STRAND_IGGY_PASSWORD")}
	if tg.user == "" {
		tg.user = "iggy"
	}
	if os.Getenv("STRAND_IGGY_PROTOCOL") == "0.10" && !strings.Contains(t.Name(), "012") {
		t.Skip("the server speaks Iggy 0.10 (STRAND_IGGY_PROTOCOL): these scenarios use the SDK v0.8.0; TestScenarios012RealServer covers 0.10")
	}
	if tg.pass == "" {
		tg.pass = "iggy"
	}
	return tg
}

// rawCall logs in and sends one request the v0.8.0 SDK cannot express
// (PurgeTopic, PurgeStream, GetMe) on its own connection, returning the
// response status and payload. Everything the SDK can do goes through it.
func (tg target) rawCall(t testing.TB, code Command, payload []byte) (uint32, []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", tg.addr)
	must(t, err)
	defer nc.Close()
	call := func(code Command, payload []byte) (uint32, []byte) {
		frame := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)+4))
		frame = binary.LittleEndian.AppendUint32(frame, uint32(code))
		frame = append(frame, payload...)
		_, err := nc.Write(frame)
		must(t, err)
		var hdr [8]byte
		_, err = io.ReadFull(nc, hdr[:])
		must(t, err)
		body := make([]byte, binary.LittleEndian.Uint32(hdr[4:]))
		_, err = io.ReadFull(nc, body)
		must(t, err)
		return binary.LittleEndian.Uint32(hdr[:4]), body
	}
	login := append([]byte{byte(len(tg.user))}, tg.user...)
	login = append(append(login, byte(len(tg.pass))), tg.pass...)
	login = binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(login, 0), 0)
	if st, _ := call(CmdLoginUser, login); st != 0 {
		t.Fatalf("raw login: status %d", st)
	}
	return call(code, payload)
}

func rawIdentBytes(id iggcon.Identifier) []byte {
	b, _ := id.MarshalBinary()
	return b
}
