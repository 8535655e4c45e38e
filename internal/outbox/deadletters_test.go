package outbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

func TestDeadLetterMessageFitsBrokerLimits(t *testing.T) {
	d := deadletter.Letter{
		Source: "src", Partition: 3, Offset: 9, Reason: deadletter.ReasonPermanent,
		Err:     errors.New(strings.Repeat("é", 200)), // 400 bytes
		Headers: connector.Headers{Key: []byte("k"), Tag: 1, Ordering: planner.Relaxed},
	}
	m := deadLetterMessage(d)
	for _, f := range m.Headers {
		if len(f.Value) == 0 || len(f.Value) > connector.MaxKeyLen {
			t.Errorf("header %q has %d bytes", f.Name, len(f.Value))
		}
	}
	if e := header(m, deadletter.HeaderError); !strings.HasPrefix(e, "permanent") && !strings.HasPrefix(e, "é") || !utf8Valid(e) {
		t.Errorf("error header %q", e)
	}
	if header(m, deadletter.HeaderEmptyPayload) != "1" || len(m.Payload) != 1 {
		t.Errorf("empty payload not marked: %+v", m)
	}
	if m.ID != d.ID() || m.ID == ([16]byte{}) {
		t.Error("message id is not the dead letter's id")
	}
	d.Err, d.Payload = nil, []byte("body")
	m = deadLetterMessage(d)
	if header(m, deadletter.HeaderError) != "" || header(m, deadletter.HeaderEmptyPayload) != "" {
		t.Errorf("message of a dead letter without error: %+v", m)
	}
}

func header(m connector.Message, name string) string {
	for _, f := range m.Headers {
		if f.Name == name {
			return string(f.Value)
		}
	}
	return ""
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
