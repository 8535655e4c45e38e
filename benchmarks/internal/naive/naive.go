// Package naive is the baseline strand's benchmarks are measured against: a
// consumer that does what one writes without strand. Per event it decodes
// the payload, reads the account from Pebble (through the batch, so repeated
// keys see their own writes), folds the event in, encodes the account and
// writes it back; per batch (one poll) it writes the checkpoint and commits.
// It uses the same payload and value codecs as strand's run, the same
// Pebble options as stream/state, and sync commits.
package naive

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/stream/connector"
)

// Store is the naive consumer's Pebble database. ApplyBatch may be called
// concurrently for different partitions (Pebble batches are independent and
// concurrent commits share fsyncs).
type Store struct {
	db    *pebble.DB
	decls workload.Decls
	wopts *pebble.WriteOptions
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// Open opens a store in dir with the options stream/state uses (64 MiB
// cache, 16 MiB memtables, stop at 4, bloom filters). sync selects fsync per
// commit.
func Open(dir string, decls workload.Decls, sync bool) (*Store, error) {
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
		FormatMajorVersion:          pebble.FormatValueSeparation,
		Logger:                      quiet{},
	}
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("naive: open %s: %w", dir, err)
	}
	s := &Store{db: db, decls: decls, wopts: pebble.NoSync}
	if sync {
		s.wopts = pebble.Sync
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func rowKey(dst []byte, partition uint32, key []byte) []byte {
	dst = append(dst, 0x03)
	dst = binary.BigEndian.AppendUint32(dst, partition)
	dst = binary.BigEndian.AppendUint32(dst, 1) // table id
	return append(dst, key...)
}

func checkpointKey(partition uint32) []byte {
	k := []byte{0x02}
	k = binary.BigEndian.AppendUint32(k, partition)
	return append(k, workload.Source...)
}

// ApplyBatch applies one polled batch of one partition: per record Get,
// decode, fold, encode, Set; then the checkpoint (last offset + 1) and one
// commit.
func (s *Store) ApplyBatch(partition uint32, recs []connector.Record) error {
	if len(recs) == 0 {
		return nil
	}
	b := s.db.NewIndexedBatch()
	defer b.Close()
	var kbuf, vbuf []byte
	for i := range recs {
		r := &recs[i]
		if r.HeaderErr != nil {
			return fmt.Errorf("naive: partition %d offset %d: %w", partition, r.Offset, r.HeaderErr)
		}
		kbuf = rowKey(kbuf[:0], partition, r.Headers.Key)
		var a workload.Account
		val, closer, err := b.Get(kbuf)
		switch {
		case err == nil:
			a, err = s.decls.Values.Decode(val)
			_ = closer.Close()
			if err != nil {
				return fmt.Errorf("naive: partition %d offset %d: decode account: %w", partition, r.Offset, err)
			}
		case errors.Is(err, pebble.ErrNotFound):
		default:
			return fmt.Errorf("naive: partition %d offset %d: get: %w", partition, r.Offset, err)
		}
		if err := s.decls.Apply(&a, r.Headers.Tag, r.Payload); err != nil {
			return fmt.Errorf("naive: partition %d offset %d: %w", partition, r.Offset, err)
		}
		vbuf, err = s.decls.Values.Append(vbuf[:0], a)
		if err != nil {
			return fmt.Errorf("naive: partition %d offset %d: encode account: %w", partition, r.Offset, err)
		}
		if err := b.Set(kbuf, vbuf, nil); err != nil {
			return fmt.Errorf("naive: partition %d offset %d: set: %w", partition, r.Offset, err)
		}
	}
	var next [8]byte
	binary.BigEndian.PutUint64(next[:], recs[len(recs)-1].Offset+1)
	if err := b.Set(checkpointKey(partition), next[:], nil); err != nil {
		return fmt.Errorf("naive: partition %d: checkpoint: %w", partition, err)
	}
	if err := b.Commit(s.wopts); err != nil {
		return fmt.Errorf("naive: partition %d: commit: %w", partition, err)
	}
	return nil
}

// Checkpoint returns the partition's next offset (0 if never committed).
func (s *Store) Checkpoint(partition uint32) (uint64, error) {
	v, closer, err := s.db.Get(checkpointKey(partition))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(v), nil
}

// Balances reads every account back.
func (s *Store) Balances() (map[workload.AccountID]workload.Account, error) {
	got := map[workload.AccountID]workload.Account{}
	err := s.ScanBalances(func(id workload.AccountID, a workload.Account) bool {
		got[id] = a
		return true
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}

// ScanBalances calls fn for every account in key order until it returns
// false.
func (s *Store) ScanBalances(fn func(workload.AccountID, workload.Account) bool) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{0x03}, UpperBound: []byte{0x04}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 1+4+4+8 {
			_ = it.Close()
			return fmt.Errorf("naive: unexpected row key %x", k)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return err
		}
		a, err := s.decls.Values.Decode(v)
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("naive: decode row %x: %w", k, err)
		}
		if !fn(workload.AccountID(binary.BigEndian.Uint64(k[9:])), a) {
			break
		}
	}
	return it.Close()
}
