package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/connector"
)

// The replay ledger: `strand dlq replay` records what it sends in the
// dead-letter topic itself, as marker messages in its partition 0 (header
// ledgerHeader), so that no replay ever sends a dead letter again that an
// earlier one sent, however many messages came since and on whatever
// machine the command runs:
//
//   - before a batch is sent, an intent marker names the batch, its
//     destination, the replay message ids and the destination partitions'
//     ends (the offset the next message gets);
//   - once the broker acknowledged the batch, a done marker names the batch
//     and the ids sent.
//
// A replay reads every marker (it reads the whole dead-letter topic
// anyway) and skips the ids of every done marker. An intent without a done
// marker is a replay interrupted between the two (killed, or its send
// failed): its destination partitions are read from the recorded ends to
// find which of its ids landed; a done marker with those is written, so
// the question is settled once. Reading from recorded offsets, not a
// window of recent messages, is what makes it exact for ever.
const (
	ledgerHeader  = "strand-replay-ledger"
	ledgerVersion = "1"
	ledgerKey     = "strand-replay-ledger"
)

// ledgerMarker is the payload of a marker message.
type ledgerMarker struct {
	Kind  string   `json:"kind"` // "intent" or "done"
	Batch string   `json:"batch"`
	Dest  string   `json:"dest,omitempty"`
	Ends  []uint64 `json:"ends,omitempty"`
	IDs   []string `json:"ids"`
}

// isLedgerMarker reports whether a stored message is a ledger marker.
func isLedgerMarker(m *iggy.StoredMessage) bool {
	for _, f := range m.Headers {
		if f.Name == ledgerHeader {
			return true
		}
	}
	return false
}

// ledger is what the markers of a dead-letter topic say.
type ledger struct {
	sent    map[[16]byte]bool
	intents map[string]ledgerMarker // without a done marker yet
	bad     int                     // markers that could not be read
}

func newLedger() *ledger {
	return &ledger{sent: map[[16]byte]bool{}, intents: map[string]ledgerMarker{}}
}

// add takes in one marker, in the order of the topic.
func (l *ledger) add(payload []byte) {
	var m ledgerMarker
	if err := json.Unmarshal(payload, &m); err != nil || m.Batch == "" {
		l.bad++
		return
	}
	switch m.Kind {
	case "intent":
		l.intents[m.Batch] = m
	case "done":
		delete(l.intents, m.Batch)
		for _, s := range m.IDs {
			if id, ok := parseID(s); ok {
				l.sent[id] = true
			}
		}
	default:
		l.bad++
	}
}

func parseID(s string) ([16]byte, bool) {
	var id [16]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return id, false
	}
	copy(id[:], b)
	return id, true
}

func idStrings(msgs []connector.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = hex.EncodeToString(msgs[i].ID[:])
	}
	return out
}

// ledgerWriter writes markers to partition 0 of the dead-letter topic.
type ledgerWriter struct {
	sink *iggy.Sink
}

func (w *ledgerWriter) write(ctx context.Context, m ledgerMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	msg := connector.Message{Key: []byte(ledgerKey), ID: id, Partition: 0, HasPartition: true, Payload: b,
		Headers: []connector.Field{{Name: ledgerHeader, Value: []byte(ledgerVersion)}}}
	if err := w.sink.Send(ctx, []connector.Message{msg}); err != nil {
		return fmt.Errorf("record the replay in %s (the replay ledger): %w", w.sink.Name(), err)
	}
	return nil
}

// newBatchID names a batch of a replay.
func newBatchID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// settle decides every intent without a done marker: it reads the
// intent's destination partitions from the recorded ends, marks the ids
// found as sent and writes a done marker with them. It returns how many
// intents it settled.
func (l *ledger) settle(ctx context.Context, cl *iggy.Client, w *ledgerWriter) (int, error) {
	batches := make([]string, 0, len(l.intents))
	for b := range l.intents {
		batches = append(batches, b)
	}
	slices.Sort(batches)
	for _, b := range batches {
		m := l.intents[b]
		want := map[[16]byte]bool{}
		for _, s := range m.IDs {
			if id, ok := parseID(s); ok {
				want[id] = true
			}
		}
		s, t, err := splitTopic(m.Dest)
		if err != nil {
			return 0, fmt.Errorf("replay ledger: batch %s names destination %q: %w", b, m.Dest, err)
		}
		var found []string
		for p, from := range m.Ends {
			for {
				msgs, err := cl.Read(ctx, s, t, uint32(p), from, 10_000)
				if err != nil {
					return 0, fmt.Errorf("replay ledger: settle the interrupted batch %s: read %s partition %d from offset %d: %w", b, m.Dest, p, from, err)
				}
				for i := range msgs {
					if want[msgs[i].ID] {
						found = append(found, hex.EncodeToString(msgs[i].ID[:]))
						l.sent[msgs[i].ID] = true
					}
				}
				if len(msgs) < 10_000 {
					break
				}
				from = msgs[len(msgs)-1].Offset + 1
			}
		}
		if err := w.write(ctx, ledgerMarker{Kind: "done", Batch: b, IDs: found}); err != nil {
			return 0, err
		}
		delete(l.intents, b)
	}
	return len(batches), nil
}
