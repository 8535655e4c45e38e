package iggy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// Invalid option values are refused by the constructor, with an error
// naming the option, never clamped.
func TestInvalidOptionsAreRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"iggy.WithCredentials", WithCredentials("", "x")},
		{"iggy.WithPersonalAccessToken", WithPersonalAccessToken("")},
		{"iggy.WithDialTimeout", WithDialTimeout(0)},
		{"iggy.WithCallTimeout", WithCallTimeout(-time.Second)},
		{"iggy.WithBackoff", WithBackoff(time.Second, time.Millisecond)},
		{"iggy.WithLogger", WithLogger(nil)},
		{"iggy.WithTLSServerName", WithTLS(WithTLSServerName(""))},
		{"iggy.WithTLSCAFile", WithTLS(WithTLSCAFile(""))},
		{"iggy.WithSourceOptions", WithSourceOptions(WithPollBatch(0))},
		{"iggy.WithPollLinger", WithSourceOptions(WithPollLinger(-time.Millisecond))},
	} {
		if _, err := Connect(ctx, "127.0.0.1:1", tc.opt); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Connect with a bad %s: %v", tc.name, err)
		}
	}

	srv, err := iggytest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := Connect(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.EnsureTopic(ctx, "s", "t", 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  PublisherOption
	}{
		{"iggy.WithBatchSize", WithBatchSize(0)},
		{"iggy.WithBatchBytes", WithBatchBytes(-1)},
		{"iggy.WithLinger", WithLinger(-time.Second)},
		{"iggy.WithBufferBytes", WithBufferBytes(0)},
		{"iggy.WithConnections", WithConnections(0)},
		{"iggy.WithMessageIDs", WithMessageIDs(nil)},
		{"iggy.WithDeliveryTimeout", WithDeliveryTimeout(-1)},
		{"iggy.WithResendCheckWindow", WithResendCheckWindow(-1)},
	} {
		if _, err := NewPublisher(ctx, c, "s", "t", tc.opt); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("NewPublisher with a bad %s: %v", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		opt  SourceOption
	}{
		{"iggy.WithPollBatch", WithPollBatch(0)},
		{"iggy.WithIdleBackoff", WithIdleBackoff(0, time.Second)},
		{"iggy.WithConsumer", WithConsumer("")},
		{"iggy.WithPollLinger", WithPollLinger(-time.Millisecond)},
		{"iggy.WithPollLinger", WithPollLinger(2 * time.Second)},
	} {
		if _, err := NewSource(c, "s", "t", tc.opt); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("NewSource with a bad %s: %v", tc.name, err)
		}
	}
}
