package rows

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// A window's dead-letter row is recognised as a dead letter of its source,
// carries its offset after the source, and never takes a record's or a
// timer's row, nor another window's.
func TestWindowDeadLetterKey(t *testing.T) {
	pre := DeadLettersPrefix("s")
	w := WindowDeadLetterKey("s", 7, "sums", 10, 20, []byte("k"))
	if !IsDeadLetterKey(pre, w) {
		t.Fatalf("%x is not a dead-letter key", w)
	}
	if off := binary.BigEndian.Uint64(w[len(pre):]); off != 7 {
		t.Fatalf("offset %d, want 7", off)
	}
	others := [][]byte{
		DeadLetterKey("s", 7),
		TimerDeadLetterKey("s", 7, "sums", 10, []byte("k")),
		WindowDeadLetterKey("s", 7, "sums", 20, 30, []byte("k")),
		WindowDeadLetterKey("s", 7, "sums", 10, 20, []byte("j")),
		WindowDeadLetterKey("s", 7, "sum", 10, 20, []byte("k")),
	}
	for _, o := range others {
		if bytes.Equal(o, w) {
			t.Fatalf("%x: two dead letters share a row", o)
		}
	}
	if IsDeadLetterKey(DeadLettersPrefix("t"), w) {
		t.Fatal("a window's letter of source s is taken for source t's")
	}
}
