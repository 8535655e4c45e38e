package iggy

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/apache/iggy/foreign/go/client/tcp"
	ierror "github.com/apache/iggy/foreign/go/errors"
)

// replyChunk bounds what roundTrip allocates ahead of the bytes actually
// received: a reply that announces more is read in steps of this size, so a
// corrupt length field cannot make it allocate gigabytes for nothing.
const replyChunk = 64 << 20

// roundTrip sends one request frame on the SDK client's socket and returns
// the payload of its reply, in a buffer of its own that it never touches
// again (the caller may hand out slices of it). It runs as any other call
// (deadline, cancellation, reconnect and login on first use, a connection
// that fails is discarded); the SDK is used for everything but this
// request's bytes. This is safe because a conn carries one call at a time
// and the SDK client holds no lock or buffered bytes between calls: a call
// writes its request and reads its whole reply.
//
// An error status comes back as the SDK's sentinel for it (ierror.FromCode),
// as from an SDK call. A reply that cannot be framed wraps ErrProtocol.
func (k *conn) roundTrip(ctx context.Context, frame []byte) ([]byte, error) {
	var reply []byte
	err := k.call(ctx, func(*tcp.IggyTcpClient) error {
		var err error
		reply, err = k.exchange(frame)
		return err
	})
	return reply, err
}

// exchange writes one request frame on the SDK client's socket and reads
// its reply, for roundTrip and the publisher's sends. It must run inside a
// call (conn.do), which holds the connection.
func (k *conn) exchange(frame []byte) ([]byte, error) {
	k.mu.Lock()
	raw := k.raw
	k.mu.Unlock()
	if raw == nil {
		return nil, fmt.Errorf("%w: no socket", ErrDisconnected)
	}
	if _, err := raw.Write(frame); err != nil {
		return nil, fmt.Errorf("send request: %w", err)
	}
	var hdr [replyHeaderSize]byte
	if _, err := io.ReadFull(raw, hdr[:]); err != nil {
		return nil, fmt.Errorf("failed to read response for TCP request: %w", err)
	}
	status := binary.LittleEndian.Uint32(hdr[0:])
	n := uint64(binary.LittleEndian.Uint32(hdr[4:]))
	if status != 0 {
		if n != 0 {
			// The 0.8 server sends no payload with an error; one that
			// does leaves the stream out of step.
			return nil, fmt.Errorf("%w: error reply %d carries %d bytes", ErrProtocol, status, n)
		}
		return nil, ierror.FromCode(ierror.Code(status))
	}
	b, err := readN(raw, n)
	if err != nil {
		return nil, fmt.Errorf("failed to read response for TCP request: %w", err)
	}
	return b, nil
}

// readN reads exactly n bytes into a new buffer, allocating at most
// replyChunk bytes beyond those received so far.
func readN(r io.Reader, n uint64) ([]byte, error) {
	if n <= replyChunk {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b := make([]byte, 0, replyChunk)
	for uint64(len(b)) < n {
		step := min(n-uint64(len(b)), replyChunk)
		b = append(b, make([]byte, step)...)
		if _, err := io.ReadFull(r, b[uint64(len(b))-step:]); err != nil {
			return nil, err
		}
	}
	return b, nil
}
