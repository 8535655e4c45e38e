package iggytest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
)

// memConn is a net.Conn over a fixed input; what the broker writes is kept.
type memConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (m *memConn) Read(b []byte) (int, error)         { return m.in.Read(b) }
func (m *memConn) Write(b []byte) (int, error)        { return m.out.Write(b) }
func (m *memConn) Close() error                       { return nil }
func (m *memConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (m *memConn) RemoteAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000} }
func (m *memConn) SetDeadline(t time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(t time.Time) error { return nil }

var (
	fuzzOnce sync.Once
	fuzzSrv  *Server
)

// fuzzServer is one in-memory broker shared by the fuzz targets, with a
// stream "s" holding topic "t" (2 partitions, a few messages, group "g").
// It has no listener and starts no goroutine: requests are fed to
// connections over in-memory conns.
func fuzzServer(t testing.TB) *Server {
	fuzzOnce.Do(func() {
		srv := newServer(config{user: "iggy", pass: "iggy", maxMsgSize: maxPayloadSize, maxSendBytes: 1 << 20})
		c := srv.newConn(&memConn{in: bytes.NewReader(nil)})
		c.sess.userID.Store(0)
		run := func(cmd Command, p []byte) {
			if err := c.dispatch(cmd, p); err != nil {
				t.Fatal(err)
			}
		}
		run(CmdCreateStream, encoder(nil).name("s"))
		topic := encoder(nil).u8(2).u8(1).u8('s').u32(2).u8(1).u64(0).u64(0).u8(0).name("t")
		run(CmdCreateTopic, topic)
		run(CmdCreateConsumerGroup, encoder(nil).u8(2).u8(1).u8('s').u8(2).u8(1).u8('t').name("g"))
		run(CmdSendMessages, sendPayload(3))
		fuzzSrv = srv
	})
	return fuzzSrv
}

// sendPayload builds a SendMessages payload the way the SDK does.
func sendPayload(n int) []byte {
	var msgs []byte
	var idx []byte
	for i := 0; i < n; i++ {
		m, _ := iggcon.NewIggyMessage([]byte{byte('a' + i)})
		msgs = append(msgs, m.Header.ToBytes()...)
		msgs = append(msgs, m.Payload...)
		idx = binary.LittleEndian.AppendUint32(idx, 0)
		idx = binary.LittleEndian.AppendUint32(idx, uint32(len(msgs)))
		idx = binary.LittleEndian.AppendUint64(idx, 0)
	}
	meta := encoder(nil).u8(2).u8(1).u8('s').u8(2).u8(1).u8('t').u8(2).u8(4).u32(1).u32(uint32(n))
	p := binary.LittleEndian.AppendUint32(nil, uint32(len(meta)))
	p = append(p, meta...)
	p = append(p, idx...)
	return append(p, msgs...)
}

// checkResponses verifies that out is a well-formed sequence of responses.
func checkResponses(t *testing.T, out []byte) int {
	n := 0
	for len(out) > 0 {
		if len(out) < 8 {
			t.Fatalf("truncated response header: %x", out)
		}
		l := int(binary.LittleEndian.Uint32(out[4:]))
		if binary.LittleEndian.Uint32(out) != 0 && l != 0 {
			t.Fatalf("error response with a payload: %x", out[:8])
		}
		if len(out) < 8+l {
			t.Fatalf("response payload of %d bytes truncated to %d", l, len(out)-8)
		}
		out = out[8+l:]
		n++
	}
	return n
}

// FuzzConnection feeds arbitrary bytes to one connection: the broker must
// answer with well-formed frames or close the connection, never panic or
// hang, whatever the bytes.
func FuzzConnection(f *testing.F) {
	frame := func(cmd Command, p []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(p)+4))
		b = binary.LittleEndian.AppendUint32(b, uint32(cmd))
		return append(b, p...)
	}
	login := encoder(nil).name("iggy").name("iggy").u32(0).u32(0)
	f.Add(frame(CmdPing, nil))
	f.Add(append(frame(CmdLoginUser, login), frame(CmdSendMessages, sendPayload(2))...))
	f.Add(append(frame(CmdLoginUser, login), frame(CmdGetStream, []byte{2, 1, 's'})...))
	poll := encoder(nil).u8(1).u8(1).u8(4).u32(0).u8(2).u8(1).u8('s').u8(2).u8(1).u8('t').u8(1).u32(0).u8(3).u64(0).u32(10).u8(1)
	f.Add(append(frame(CmdLoginUser, login), frame(CmdPollMessages, poll)...))
	f.Add([]byte{3, 0, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 101, 0, 0, 0})
	f.Add(frame(999, []byte("garbage")))
	f.Fuzz(func(t *testing.T, data []byte) {
		srv := fuzzServer(t)
		mc := &memConn{in: bytes.NewReader(data)}
		c := srv.newConn(mc)
		c.br = bufio.NewReader(mc)
		for i := 0; i < 1000; i++ {
			if err := c.serveOne(); err != nil {
				break
			}
		}
		srv.removeSession(c.sess)
		checkResponses(t, mc.out.Bytes())
	})
}

// FuzzRequestPayload runs every command's handler on an arbitrary payload,
// logged in or not.
func FuzzRequestPayload(f *testing.F) {
	f.Add(uint32(CmdSendMessages), sendPayload(1), true)
	f.Add(uint32(CmdCreateTopic), []byte(encoder(nil).u8(1).u8(4).u32(0).u32(3).u8(1).u64(0).u64(0).u8(0).name("x")), true)
	f.Add(uint32(CmdStoreConsumerOffset), []byte(encoder(nil).u8(2).u8(2).u8(1).u8('g').u8(1).u8(4).u32(0).u8(1).u8(4).u32(0).u8(1).u32(0).u64(1)), true)
	f.Add(uint32(CmdJoinConsumerGroup), []byte{2, 1, 's', 2, 1, 't', 2, 1, 'g'}, true)
	f.Add(uint32(CmdLoginUser), []byte{4, 'i', 'g', 'g', 'y', 4, 'i', 'g', 'g', 'y', 0, 0, 0, 0, 0, 0, 0, 0}, false)
	perms := encoder(nil).permissions(fuzzPermissions())
	createUser := encoder(nil).name("fuzzer").name("password").u8(1).u8(1).u32(uint32(len(perms)))
	f.Add(uint32(CmdCreateUser), []byte(append(createUser, perms...)), true)
	updPerms := encoder(nil).u8(2).name("fuzzer").u8(1).u32(uint32(len(perms)))
	f.Add(uint32(CmdUpdatePermissions), []byte(append(updPerms, perms...)), true)
	f.Add(uint32(CmdUpdateUser), []byte(encoder(nil).u8(2).name("fuzzer").u8(1).name("fuzzed").u8(1).u8(2)), true)
	f.Add(uint32(CmdChangePassword), []byte(encoder(nil).u8(1).u8(4).u32(1).name("password").name("pass2")), true)
	f.Add(uint32(CmdCreatePersonalAccessToken), []byte(encoder(nil).name("token").u64(1000)), true)
	f.Add(uint32(CmdLoginWithPersonalAccessToken), []byte(encoder(nil).name("not-a-token")), false)
	f.Add(uint32(CmdGetStats), []byte{}, true)
	f.Fuzz(func(t *testing.T, code uint32, payload []byte, authed bool) {
		srv := fuzzServer(t)
		switch Command(code) {
		case CmdDeleteStream, CmdDeleteTopic, CmdPurgeStream, CmdPurgeTopic, CmdDeletePartitions:
			return // keep the shared fixture usable
		}
		mc := &memConn{in: bytes.NewReader(nil)}
		c := srv.newConn(mc)
		if authed {
			c.sess.userID.Store(0)
		}
		p := append([]byte(nil), payload...)
		if err := c.dispatch(Command(code), p); err != nil && err != errCloseConn {
			t.Fatalf("dispatch: %v", err)
		}
		srv.removeSession(c.sess)
		if n := checkResponses(t, mc.out.Bytes()); n != 1 {
			t.Fatalf("%d responses to one request", n)
		}
	})
}

// FuzzParseSend checks the SendMessages validator: it never panics and
// whatever it accepts is a well-formed run of whole messages.
func FuzzParseSend(f *testing.F) {
	f.Add(sendPayload(1))
	f.Add(sendPayload(3))
	f.Add([]byte{1, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, st := parseSend(p, maxPayloadSize)
		if st != 0 {
			return
		}
		if _, err := parseStoredBatch(stampedCopy(r), 0); err != nil {
			t.Fatalf("accepted batch does not parse back: %v", err)
		}
	})
}

func stampedCopy(r sendRequest) []byte {
	data := append([]byte(nil), r.msgs...)
	start := uint32(0)
	for i, end := range r.ends {
		binary.LittleEndian.PutUint64(data[start+24:], uint64(i))
		start = end
	}
	return data
}

// FuzzStoredRecords checks the recovery path: arbitrary file contents are
// records that parse, then nothing, a torn tail or damage, never a panic;
// and salvage finds every record a clean scan found.
func FuzzStoredRecords(f *testing.F) {
	r, _ := parseSend(sendPayload(2), maxPayloadSize)
	body := stampedCopy(r)
	f.Add(appendRecord(fileHeader(0), body))
	op := metaOp{kind: opCreateStream, name: "s"}
	ob := op.encode(nil)
	f.Add(appendRecord(fileHeader(0), ob))
	uop := metaOp{kind: opPutUser, blob: encoder(nil).user(&user{id: 3, name: "u", status: 1, salt: []byte{1}, hash: []byte{2},
		perms: fuzzPermissions(), tokens: []*accessToken{{name: "tok", expiryAt: 9}}})}
	ub := uop.encode(nil)
	f.Add(appendRecord(appendRecord(fileHeader(0), ub), ob))
	f.Add(append(appendRecord(fileHeader(0), ob), 1, 2, 3))
	path := filepath.Join(f.TempDir(), "f.log")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		n := 0
		o, err := scanFile(path, nil, func(b []byte, _ int64) error {
			_, err := parseStoredBatch(b, 0)
			if err != nil {
				_, err = decodeOp(b)
			}
			if err == nil {
				n++
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if o.end < 0 || o.end > int64(len(data)) || (o.clean() && o.end != int64(len(data))) {
			t.Fatalf("intact prefix %d of %d bytes (%+v)", o.end, len(data), o)
		}
		if recs, _ := salvage(data, true); len(recs) < n {
			t.Fatalf("salvage found %d records, a scan %d", len(recs), n)
		}
	})
}

func fuzzPermissions() *permissions {
	p := &permissions{}
	p.global[gReadStreams] = true
	p.streams = []streamPerms{{id: 0, topics: []topicPerms{{id: 0, f: [topicFlags]bool{true}}, {id: 5}}}, {id: 2}}
	return p
}

// FuzzPermissions checks the permissions decoder: it never panics, and
// what it accepts encodes to bytes that decode to the same permissions.
func FuzzPermissions(f *testing.F) {
	f.Add([]byte(encoder(nil).permissions(fuzzPermissions())))
	f.Add([]byte(encoder(nil).permissions(rootPermissions())))
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 3, 0, 0, 0, 1, 1, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := decoder{b: b}
		p := d.permissions()
		if d.st != 0 {
			return
		}
		enc := encoder(nil).permissions(p)
		d2 := decoder{b: enc}
		p2 := d2.permissions()
		if d2.st != 0 || d2.off != len(enc) {
			t.Fatalf("re-encoded permissions do not decode: status %d at %d of %d", d2.st, d2.off, len(enc))
		}
		if !bytes.Equal(encoder(nil).permissions(p2), enc) {
			t.Fatalf("permissions changed in a round trip")
		}
	})
}

// FuzzUserRecord checks the decoder of logged user records.
func FuzzUserRecord(f *testing.F) {
	u := &user{id: 1, name: "someone", status: userActive, salt: make([]byte, 16), hash: make([]byte, 32), perms: fuzzPermissions(),
		tokens: []*accessToken{{name: "a"}, {name: "b", expiryAt: 1}}}
	f.Add([]byte(encoder(nil).user(u)))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := decoder{b: b}
		u := d.user()
		if u == nil {
			return
		}
		enc := encoder(nil).user(u)
		d2 := decoder{b: enc}
		u2 := d2.user()
		if u2 == nil || d2.off != len(enc) || !bytes.Equal(encoder(nil).user(u2), enc) {
			t.Fatalf("user record does not round-trip")
		}
	})
}
