package iggy

import (
	"context"
	"io"

	"github.com/strand-io/strand/connectors/iggy/internal/wire"
)

// replyChunk bounds what a reply read allocates ahead of the bytes actually
// received: a reply that announces more is read in steps of this size, so a
// corrupt length field cannot make it allocate gigabytes for nothing.
const replyChunk = 64 << 20

// roundTrip sends one request (code and body) and returns the payload of
// its reply, in a buffer of its own that it never touches again (the
// caller may hand out slices of it). It runs as any other call (deadline,
// cancellation, reconnect and login on first use, a connection that fails
// is discarded).
//
// An error status comes back as the SDK's sentinel for it (ierror.FromCode).
// A reply that cannot be framed wraps ErrProtocol.
func (k *conn) roundTrip(ctx context.Context, code wire.Code, body []byte) ([]byte, error) {
	var reply []byte
	err := k.call(ctx, func(s *session) error {
		var err error
		reply, err = s.do(code, body, nil)
		return err
	})
	return reply, err
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
