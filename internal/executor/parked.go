package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/strand-io/strand/internal/rows"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"

	"github.com/strand-io/strand/internal/state"
)

// parkedKey is one key whose events wait: behind a failing run (retried
// after next) or behind a poison event (manual, until Release).
type parkedKey struct {
	key      []byte
	attempts int    // failed tries of the record at failedAt, in a row
	failedAt uint64 // offset of the first unapplied record of the failing run
	next     time.Time
	manual   bool
	lastErr  string
	records  []connector.Record // in offset order; they own their bytes
}

// Parked keys and records are rows of state.FamilyParked; their layout is
// internal/rows' (rows.ParkedMetaKey, rows.ParkedRecordKey).

// attemptOf returns the try that processing the parked record at offset
// will be: one more than the failed tries if the key stopped there, else 1.
func (pk *parkedKey) attemptOf(offset uint64) int {
	if pk.attempts > 0 && offset == pk.failedAt {
		return pk.attempts + 1
	}
	return 1
}

func (t *Task) parkedKeyRow(key []byte) []byte { return rows.ParkedMetaKey(t.src.name, key) }

func (t *Task) parkedRecordRow(key []byte, offset uint64) []byte {
	return rows.ParkedRecordKey(t.src.name, key, offset)
}

func (pk *parkedKey) metaValue() []byte {
	return rows.AppendParkedMeta(nil, rows.ParkedMeta{Manual: pk.manual, Attempts: pk.attempts, Next: pk.next, LastErr: pk.lastErr, FailedAt: pk.failedAt})
}

// Parked records are rows in connector.Record's binary encoding
// (rows.AppendRecord), under their partition.
func encodeParkedRecord(r connector.Record) []byte {
	return rows.AppendRecord(nil, r)
}

// loadParked reads the task's parked keys and records from the database.
func (t *Task) loadParked(ctx context.Context) error {
	legacy := map[string]bool{} // keys whose meta row predates failedAt
	err := t.db.Rows(ctx, state.FamilyParked, t.partition, func(key, value []byte) error {
		src, kind, k, err := rows.ParseParkedKey(key)
		if err != nil {
			return err
		}
		if src != t.src.name {
			return nil
		}
		pk, ok := t.parked[string(k)]
		if !ok {
			pk = &parkedKey{key: k}
			t.parked[string(k)] = pk
		}
		switch kind {
		case rows.ParkedKindMeta:
			m, err := rows.DecodeParkedMeta(value)
			if err != nil {
				return fmt.Errorf("parked key %q: %w", k, err)
			}
			pk.manual, pk.attempts, pk.next, pk.lastErr = m.Manual, m.Attempts, m.Next, m.LastErr
			if m.HasFailedAt {
				pk.failedAt = m.FailedAt
			} else {
				legacy[string(k)] = true
			}
		case rows.ParkedKindRecord:
			r, err := rows.DecodeParkedRecord(t.partition, value)
			if err != nil {
				return fmt.Errorf("parked record of key %q: %w", k, err)
			}
			pk.records = append(pk.records, r)
		default:
			return fmt.Errorf("%w: parked row key %x: kind %q unknown", stream.ErrCodec, key, kind)
		}
		return nil
	})
	for k := range legacy {
		if pk := t.parked[k]; len(pk.records) > 0 {
			pk.failedAt = pk.records[0].Offset
		}
	}
	return err
}
