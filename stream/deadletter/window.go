package deadletter

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Window is the window a dead letter of ReasonWindowFinal describes: its
// payload, in JSON ({"table", "key" (base64), "start" and "end" (RFC 3339,
// for people), "start_unix_nano", "end_unix_nano", "aggregate" (base64)}).
type Window struct {
	// Table is the name of the window table whose EmitFinal failed.
	Table string
	// Key is the key's bytes (as its key codec encodes it).
	Key []byte
	// Start and End are the window's bounds, in event time: [Start, End).
	Start, End time.Time
	// Aggregate is the window's aggregate as the window table's value
	// codec encodes it (decode it with that codec to compute the result
	// again); nil when it did not encode.
	Aggregate []byte
}

type windowJSON struct {
	Table         string `json:"table"`
	Key           []byte `json:"key"`
	Start         string `json:"start"`
	End           string `json:"end"`
	StartUnixNano int64  `json:"start_unix_nano"`
	EndUnixNano   int64  `json:"end_unix_nano"`
	Aggregate     []byte `json:"aggregate"`
}

// Payload returns w as a dead letter's payload.
func (w Window) Payload() []byte {
	b, _ := json.Marshal(windowJSON{Table: w.Table, Key: w.Key,
		Start: w.Start.UTC().Format(time.RFC3339Nano), End: w.End.UTC().Format(time.RFC3339Nano),
		StartUnixNano: w.Start.UnixNano(), EndUnixNano: w.End.UnixNano(),
		Aggregate: w.Aggregate}) // cannot fail: strings, bytes, ints
	return b
}

// Window returns the window a dead letter of ReasonWindowFinal describes.
// It fails, with an error wrapping ErrNotWindow, for a dead letter of
// another reason or whose payload is not a window.
func (d Letter) Window() (Window, error) {
	if d.Reason != ReasonWindowFinal {
		return Window{}, fmt.Errorf("%w: reason %s", ErrNotWindow, d.Reason)
	}
	var w windowJSON
	if err := json.Unmarshal(d.Payload, &w); err != nil {
		return Window{}, fmt.Errorf("%w: payload: %w", ErrNotWindow, err)
	}
	return Window{Table: w.Table, Key: w.Key, Start: time.Unix(0, w.StartUnixNano).UTC(),
		End: time.Unix(0, w.EndUnixNano).UTC(), Aggregate: w.Aggregate}, nil
}

// ErrNotWindow is wrapped by Letter.Window's error for a dead letter that
// does not describe a window.
var ErrNotWindow = errors.New("strand: deadletter: not the dead letter of a window's final result")
