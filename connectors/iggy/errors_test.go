package iggy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	ierror "github.com/apache/iggy/foreign/go/errors"
)

func TestErrorClassification(t *testing.T) {
	write := &net.OpError{Op: "write", Net: "tcp", Err: errors.New("broken pipe")}
	read := fmt.Errorf("failed to read response for TCP request: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
	tests := []struct {
		name      string
		err       error
		class     class
		notSent   bool
		transient bool
	}{
		{"server error status", ierror.ErrTopicIdNotFound, classServer, true, false},
		{"stale client", ierror.ErrStaleClient, classTransport, true, false},
		{"write failed", write, classTransport, true, false},
		{"read timed out", read, classTransport, false, false},
		{"EOF", fmt.Errorf("failed to read response for TCP request: %w", io.EOF), classTransport, false, false},
		{"timeout as returned by a call", fmt.Errorf("%w: %w", ErrTimeout, read), classTransport, false, true},
		{"disconnect as returned by a call", fmt.Errorf("%w: %w", ErrDisconnected, io.EOF), classTransport, false, true},
		{"connect failed", &connectError{fmt.Errorf("%w: x", ErrUnreachable)}, classTransport, true, true},
		{"login refused", &connectError{fmt.Errorf("%w: %w", ErrAuth, ierror.ErrInvalidCredentials)}, classServer, true, false},
		{"closed", ErrClosed, classTransport, false, false},
		{"malformed reply", fmt.Errorf("%w: boom", ErrProtocol), classTransport, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.class {
				t.Errorf("classify = %d, want %d", got, tc.class)
			}
			if got := notSent(tc.err); got != tc.notSent {
				t.Errorf("notSent = %v, want %v", got, tc.notSent)
			}
			if got := transient(tc.err); got != tc.transient {
				t.Errorf("transient = %v, want %v", got, tc.transient)
			}
		})
	}
	if !isDeadline(read) || isDeadline(write) {
		t.Error("isDeadline misreads socket deadlines")
	}
}
