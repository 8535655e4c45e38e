package deadletter

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Timer is the timer a dead letter of ReasonTimer describes: its payload,
// in JSON ({"table", "key" (base64), "at" (RFC 3339, for people),
// "at_unix_nano"}).
type Timer struct {
	// Table is the name of the table whose timer handler failed.
	Table string
	// Key is the key's bytes (as its key codec encodes it).
	Key []byte
	// At is the time the timer was due, on the App's clock.
	At time.Time
}

type timerJSON struct {
	Table      string `json:"table"`
	Key        []byte `json:"key"`
	At         string `json:"at"`
	AtUnixNano int64  `json:"at_unix_nano"`
}

// Payload returns tm as a dead letter's payload.
func (tm Timer) Payload() []byte {
	b, _ := json.Marshal(timerJSON{Table: tm.Table, Key: tm.Key,
		At: tm.At.UTC().Format(time.RFC3339Nano), AtUnixNano: tm.At.UnixNano()}) // cannot fail: strings, bytes, an int
	return b
}

// Timer returns the timer a dead letter of ReasonTimer describes. It
// fails, with an error wrapping ErrNotTimer, for a dead letter of another
// reason or whose payload is not a timer.
func (d Letter) Timer() (Timer, error) {
	if d.Reason != ReasonTimer {
		return Timer{}, fmt.Errorf("%w: reason %s", ErrNotTimer, d.Reason)
	}
	var w timerJSON
	if err := json.Unmarshal(d.Payload, &w); err != nil {
		return Timer{}, fmt.Errorf("%w: payload: %w", ErrNotTimer, err)
	}
	return Timer{Table: w.Table, Key: w.Key, At: time.Unix(0, w.AtUnixNano).UTC()}, nil
}

// ErrNotTimer is wrapped by Letter.Timer's error for a dead letter that
// does not describe a timer.
var ErrNotTimer = errors.New("strand: deadletter: not the dead letter of a timer")
