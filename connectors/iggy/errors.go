package iggy

import (
	"errors"
	"net"
	"os"

	ierror "github.com/apache/iggy/foreign/go/errors"
)

// Sentinel errors. Every error this package returns wraps at most one of
// them plus, where there is one, the SDK's own sentinel (for example
// ierror.ErrTopicIdNotFound), so both errors.Is checks work.
var (
	// ErrUnreachable means nothing answered at the server address within the
	// dial timeout (connection refused, no route, TLS handshake failed).
	ErrUnreachable = errors.New("strand: iggy: server unreachable")
	// ErrAuth means the server refused the login (wrong user, password or
	// personal access token, or a missing permission).
	ErrAuth = errors.New("strand: iggy: login refused")
	// ErrTimeout means a call got no reply within the call timeout
	// (WithCallTimeout). The connection it used has been discarded; the next
	// call reconnects.
	ErrTimeout = errors.New("strand: iggy: call timed out")
	// ErrDisconnected means the connection broke during a call. The next call
	// reconnects.
	ErrDisconnected = errors.New("strand: iggy: connection lost")
	// ErrProtocol means the server's reply could not be decoded (the SDK
	// panicked on it, or it contradicted itself).
	ErrProtocol = errors.New("strand: iggy: malformed reply")
	// ErrClosed is returned by every operation on a closed Client,
	// Publisher, Sink or Reader.
	ErrClosed = errors.New("strand: iggy: closed")
	// ErrPartitionCountMismatch means a topic exists with another number of
	// partitions than asked for. A different count maps keys to different
	// partitions, which would break per-key order, so strand refuses it.
	ErrPartitionCountMismatch = errors.New("strand: iggy: partition count mismatch")
	// ErrInvalidMessage means an event or message cannot be written to Iggy
	// as it is (empty payload, header value out of range, key too long); the
	// message says which.
	ErrInvalidMessage = errors.New("strand: iggy: invalid message")
	// ErrOffsetGap means a partition's log no longer starts where a reader
	// needs it to (the messages were removed, usually by retention), so the
	// reader cannot deliver a contiguous sequence.
	ErrOffsetGap = errors.New("strand: iggy: offset gap")
)

// failure classes of one SDK call.
type class uint8

const (
	classOK        class = iota
	classServer          // the server answered with an error; the connection is fine
	classTransport       // the connection broke or is out of step; discard it
)

// classify says what an error returned by an SDK call means for the
// connection that made it.
func classify(err error) class {
	if err == nil {
		return classOK
	}
	var ie ierror.IggyError
	if errors.As(err, &ie) {
		switch ie.Code() {
		case ierror.ErrStaleClient.Code(), ierror.ErrUnauthenticated.Code(),
			ierror.ErrCannotEstablishConnection.Code(), ierror.EmptyResponse{}.Code():
			return classTransport
		}
		return classServer
	}
	return classTransport
}

// transient reports whether an operation that failed with err may succeed
// when retried on a fresh connection.
func transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrClosed), errors.Is(err, ErrAuth), errors.Is(err, ErrProtocol):
		return false
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrDisconnected), errors.Is(err, ErrUnreachable):
		return true
	}
	return false
}

// notSent reports whether a failed SendMessages certainly did not reach the
// server: it failed before or while writing the request. A write that fails
// leaves the server a truncated frame, which it never applies. Any other
// failure (no reply, broken reply) leaves the outcome unknown.
//
// An error status from the server (an Iggy error code) also means it did
// not apply the request.
func notSent(err error) bool {
	var ce *connectError
	if errors.As(err, &ce) || errors.Is(err, errPastSendDeadline) {
		return true
	}
	var ie ierror.IggyError
	if errors.As(err, &ie) && !errors.Is(err, ierror.EmptyResponse{}) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

// isDeadline reports whether err came from a socket deadline.
func isDeadline(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connectError marks a failure to (re)build a connection before a call was
// sent. It reads as the error it wraps.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }
