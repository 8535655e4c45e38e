package deadletter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/strand-io/strand/stream/connector"
	"github.com/zeebo/xxh3"
)

// Reason says why an event was dead-lettered.
type Reason uint8

const (
	// ReasonBadHeaders: the record's strand headers were missing or
	// malformed (connector.Record.HeaderErr, or headers that do not validate).
	ReasonBadHeaders Reason = 1
	// ReasonUnknownType: no handler of the topology takes the record's
	// type tag, and the tag is not skipped.
	ReasonUnknownType Reason = 2
	// ReasonDecode: the payload did not decode with the type's codec.
	ReasonDecode Reason = 3
	// ReasonBadKey: the key bytes did not decode with the type's key
	// codec.
	ReasonBadKey Reason = 4
	// ReasonPermanent: a handler failed with a Permanent error.
	ReasonPermanent Reason = 5
	// ReasonExhausted: a handler kept failing until the program's
	// MaxAttempts were used up.
	ReasonExhausted Reason = 6
	// ReasonKeyMismatch: the key the decoded event gives (its Key method,
	// or DeclareFunc's function) is not the key in the record's strand-key
	// header, which the record was partitioned and planned by.
	ReasonKeyMismatch Reason = 7
	// ReasonBadSequence: the record is of a sequenced type (Sequence) on a
	// re-sequenced source, but its strand-seq header is missing or 0.
	ReasonBadSequence Reason = 8
	// ReasonDuplicate: the record's sequence number was already applied
	// (or given up) for its key, or is already held, and the source's
	// duplicate policy is DeadLetterDuplicates.
	ReasonDuplicate Reason = 9
	// ReasonGapTimeout: the record was held behind a gap in its key's
	// sequence that timed out under GapDeadLetter.
	ReasonGapTimeout Reason = 10
	// ReasonHoldOverflow: the record was held when its key, or the
	// partition, exceeded its bound of held records, under GapDeadLetter or
	// GapWait.
	ReasonHoldOverflow Reason = 11
	// ReasonKeyBy: a topology.KeyBy step could not give the event its new
	// key (the key function failed or panicked, or the key does not encode
	// to 1..MaxKeyLen bytes), so the event could not be forwarded.
	ReasonKeyBy Reason = 12
	// ReasonUnclassified: the record is of a foreign source and its
	// classifier could not classify it (the error wraps ErrUnclassified).
	ReasonUnclassified Reason = 13
	// ReasonTimer: a timer handler (topology.OnTimer, OnTimerTo) failed
	// with a Permanent error or on its last allowed try, under
	// stream.PassPoison. The dead letter describes the timer, not an event:
	// its payload is a Timer in JSON (Letter.Timer reads it back), its
	// Offset is only where in the log the batch that gave it up was, and
	// it cannot be replayed.
	ReasonTimer Reason = 14
	// ReasonWindowFinal: a window table's EmitFinal function failed (it
	// panicked, or its result did not encode) for a window as it closed.
	// The dead letter describes the window, not an event: its payload is a
	// Window in JSON (Letter.Window reads it back), with the window's
	// aggregate so that its result can be computed again; its Offset is
	// only where in the log the batch that closed the window was, and it
	// cannot be replayed.
	ReasonWindowFinal Reason = 15

	reasonLast = ReasonWindowFinal
)

// String returns the reason as written in dead-letter headers:
// "bad-headers", "unknown-type", "undecodable", "bad-key",
// "permanent-failure", "retries-exhausted", "key-mismatch", "bad-sequence",
// "duplicate", "gap-timeout", "hold-overflow", "key-by", "unclassified",
// "timer-failed", "window-final-failed".
func (r Reason) String() string {
	switch r {
	case ReasonBadHeaders:
		return "bad-headers"
	case ReasonUnknownType:
		return "unknown-type"
	case ReasonDecode:
		return "undecodable"
	case ReasonBadKey:
		return "bad-key"
	case ReasonPermanent:
		return "permanent-failure"
	case ReasonExhausted:
		return "retries-exhausted"
	case ReasonKeyMismatch:
		return "key-mismatch"
	case ReasonBadSequence:
		return "bad-sequence"
	case ReasonDuplicate:
		return "duplicate"
	case ReasonGapTimeout:
		return "gap-timeout"
	case ReasonHoldOverflow:
		return "hold-overflow"
	case ReasonKeyBy:
		return "key-by"
	case ReasonUnclassified:
		return "unclassified"
	case ReasonTimer:
		return "timer-failed"
	case ReasonWindowFinal:
		return "window-final-failed"
	}
	return "reason-" + strconv.Itoa(int(r))
}

// Names of the headers a dead-letter message carries besides the original
// record's strand headers (when they were valid).
const (
	HeaderReason    = "strand-dlq-reason"
	HeaderError     = "strand-dlq-error"
	HeaderSource    = "strand-dlq-source"
	HeaderPartition = "strand-dlq-partition"
	HeaderOffset    = "strand-dlq-offset"
	HeaderAttempts  = "strand-dlq-attempts"
	// HeaderRaw marks the dead letter of a record of a foreign source:
	// its value, a decimal count n, says that the message's first n headers
	// are the original message's headers (Letter.Raw), written back
	// as they were.
	HeaderRaw = "strand-dlq-raw"
)

// HeaderEmptyPayload is set (to "1") on a dead-letter message whose
// original payload was empty: brokers such as Iggy refuse empty payloads, so
// the message carries a single zero byte instead.
const HeaderEmptyPayload = "strand-dlq-empty-payload"

// ParseReason returns the Reason whose String is s.
func ParseReason(s string) (Reason, error) {
	for r := ReasonBadHeaders; r <= reasonLast; r++ {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown dead-letter reason %q", connector.ErrBadHeaders, s)
}

// Parse reads back a dead-letter message as Letter.Message wrote it and
// the runtime published it (header values cut to 255 bytes, an empty
// payload sent as one zero byte): what a consumer of a dead-letter topic
// sees. Err holds the error text; Raw, for a record of a foreign source,
// the original headers (no message id). A message without the dead-letter
// headers is refused with an error wrapping connector.ErrBadHeaders.
func Parse(m connector.Message) (Letter, error) {
	var d Letter
	headers := m.Headers
	for i := len(headers) - 1; i >= 0; i-- {
		if headers[i].Name != HeaderRaw {
			continue
		}
		// A foreign record's own headers come first; the dead letter's,
		// after them, are read from the rest only.
		n, err := strconv.ParseUint(string(headers[i].Value), 10, 32)
		if err != nil || n > uint64(i) {
			return d, fmt.Errorf("%w: dead-letter message: %s %q does not count headers before it", connector.ErrBadHeaders, HeaderRaw, headers[i].Value)
		}
		d.Raw = (&connector.RawMessage{Headers: headers[:n:n]}).Clone()
		headers = headers[n:]
		break
	}
	hv := map[string][]byte{}
	for _, f := range headers {
		hv[f.Name] = f.Value
	}
	for _, name := range []string{HeaderReason, HeaderSource, HeaderPartition, HeaderOffset} {
		if hv[name] == nil {
			return d, fmt.Errorf("%w: dead-letter message without %s", connector.ErrBadHeaders, name)
		}
	}
	r, err := ParseReason(string(hv[HeaderReason]))
	if err != nil {
		return d, err
	}
	d.Reason, d.Source = r, string(hv[HeaderSource])
	part, perr := strconv.ParseUint(string(hv[HeaderPartition]), 10, 32)
	off, oerr := strconv.ParseUint(string(hv[HeaderOffset]), 10, 64)
	att, aerr := 0, error(nil)
	if a := hv[HeaderAttempts]; a != nil {
		att, aerr = strconv.Atoi(string(a))
	}
	if err := errors.Join(perr, oerr, aerr); err != nil {
		return d, fmt.Errorf("%w: dead-letter message: %w", connector.ErrBadHeaders, err)
	}
	d.Partition, d.Offset, d.Attempts = uint32(part), off, att
	if text := hv[HeaderError]; len(text) > 0 {
		d.Err = errors.New(string(text))
	}
	if hv[connector.HeaderKey] != nil {
		if h, err := connector.ParseHeaders(hv[connector.HeaderKey], hv[connector.HeaderType], hv[connector.HeaderProps], hv[connector.HeaderSeq]); err == nil {
			h.Key = append([]byte(nil), h.Key...)
			d.Headers = h
		}
	}
	d.Payload = append([]byte(nil), m.Payload...)
	if string(hv[HeaderEmptyPayload]) == "1" {
		d.Payload = nil
	}
	return d, nil
}

// Letter is an event strand refused or gave up on, with why and where
// it came from. The runtime writes every dead letter into the commit of its
// batch and publishes it from there to the dead-letter topic, exactly once.
type Letter struct {
	// Source, Partition and Offset say where the record was read.
	Source    string
	Partition uint32
	Offset    uint64
	// Timestamp is the record's broker timestamp (µs), or 0.
	Timestamp uint64
	// Reason says why the record was dead-lettered.
	Reason Reason
	// Err is the error; after a round trip through a row only its text
	// is kept.
	Err error
	// Attempts is how many times the failing run the record was in was
	// tried in a row (for ReasonExhausted, MaxAttempts; for
	// ReasonPermanent, the try that failed), counted for the run's first
	// unapplied record as MaxAttempts counts; 0 when the record was refused
	// before any handler saw it (bad headers, unknown type, decode).
	Attempts int
	// Headers are the record's strand headers (for a record of a foreign
	// source, what its classifier gave); zero when HeaderErr was set.
	Headers connector.Headers
	// Payload is the record's payload, unchanged.
	Payload []byte
	// Raw is set when the record is of a foreign source: the original
	// message's headers (connector.Record.Raw), which a replay writes back.
	Raw *connector.RawMessage
}

// Message turns d into a message for a dead-letter topic: the original
// payload, the original strand headers when they were valid, and headers
// for reason, error text, source, partition, offset and attempts. The
// message id is derived from source, partition and offset, so re-sending
// the same dead letter sends the same id. The key is the original key, or
// "source/partition" when the headers were bad.
//
// The dead letter of a record of a foreign source (Raw set) starts with the
// original message's headers, kinds kept, followed by the strand headers
// its classifier gave (when it gave valid ones), the dead-letter headers
// and HeaderRaw, which counts the original ones.
func (d Letter) Message() connector.Message {
	m := connector.Message{Payload: d.Payload, ID: d.ID()}
	if d.Raw != nil {
		m.Headers = append(m.Headers, d.Raw.Headers...)
	}
	nraw := len(m.Headers)
	if len(d.Headers.Key) > 0 {
		if fs, err := d.Headers.AppendFields(m.Headers); err == nil {
			m.Headers = fs
			m.Key = append([]byte(nil), d.Headers.Key...)
		}
	}
	if m.Key == nil {
		m.Key = []byte(d.Source + "/" + strconv.FormatUint(uint64(d.Partition), 10))
		if len(m.Key) > connector.MaxKeyLen {
			m.Key = m.Key[len(m.Key)-connector.MaxKeyLen:]
		}
	}
	errText := ""
	if d.Err != nil {
		errText = d.Err.Error()
	}
	m.Headers = append(m.Headers,
		connector.Field{Name: HeaderReason, Value: []byte(d.Reason.String())},
		connector.Field{Name: HeaderError, Value: []byte(errText)},
		connector.Field{Name: HeaderSource, Value: []byte(d.Source)},
		connector.Field{Name: HeaderPartition, Value: []byte(strconv.FormatUint(uint64(d.Partition), 10))},
		connector.Field{Name: HeaderOffset, Value: []byte(strconv.FormatUint(d.Offset, 10))},
		connector.Field{Name: HeaderAttempts, Value: []byte(strconv.Itoa(d.Attempts))},
	)
	if d.Raw != nil {
		m.Headers = append(m.Headers, connector.Field{Name: HeaderRaw, Value: []byte(strconv.Itoa(nraw))})
	}
	return m
}

// ID returns the dead letter's stable 16-byte message id: a hash of
// source, partition and offset, and for a timer's (ReasonTimer) or a
// window's (ReasonWindowFinal) of its payload too (the offset is only where
// its batch was).
func (d Letter) ID() [16]byte {
	b := make([]byte, 0, len(d.Source)+16)
	b = append(b, d.Source...)
	b = binary.BigEndian.AppendUint32(b, d.Partition)
	b = binary.BigEndian.AppendUint64(b, d.Offset)
	switch d.Reason {
	case ReasonTimer:
		b = append(append(b, 'T'), d.Payload...)
	case ReasonWindowFinal:
		b = append(append(b, 'W'), d.Payload...)
	}
	return xxh3.Hash128(b).Bytes()
}

// String describes d for logs.
func (d Letter) String() string {
	return fmt.Sprintf("dead letter %s/%d@%d (%s): %v", d.Source, d.Partition, d.Offset, d.Reason, d.Err)
}
