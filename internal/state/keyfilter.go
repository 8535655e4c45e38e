package state

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// The key filter answers "this table row is certainly not in Pebble" without
// asking Pebble. A projection's first event for a key (an account opened, an
// order placed) reads a row that does not exist yet; Pebble answers that
// only after looking through its memtables and every level (its bloom
// filters skip no L6 data block on point reads), which measured 7-10 µs per
// lookup at a million keys and was the largest cost of the whole run.
//
// It is a split-block Bloom filter over the hashes of every table row key
// that is in Pebble: the keys found by a scan when the database opens
// (done in the background; until it ends the filter answers nothing and
// every miss goes to Pebble), and every key a commit writes, added before
// the Pebble batch is committed. Bits are only ever set, so the filter can
// have false positives (they cost the Pebble read it would have cost
// anyway) and never false negatives: a row that is in Pebble was either
// there at open (the scan adds it) or written by a commit of this DB (which
// added it first). Deleted rows stay in the filter.
//
// It grows as keys are added: a chain of filters, each twice as large as
// the last, up to a byte budget (WithKeyFilterSize); past it the last
// filter keeps taking keys and its false-positive rate rises, never its
// false-negative one.

const (
	filterBlockWords = 8 // 8 × 32 bits: one block per key, in one cache line
	filterBitsPerKey = 12
	filterKeysPerBlk = filterBlockWords * 32 / filterBitsPerKey
	minFilterKeys    = 1 << 20 // 1.5 MiB
	// DefaultKeyFilterSize is the key filter's byte budget unless
	// WithKeyFilterSize sets another: 32 MiB, about 20 million keys at the
	// designed false-positive rate (~0.5%).
	DefaultKeyFilterSize int64 = 32 << 20
)

var filterSalts = [filterBlockWords]uint32{
	0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d,
	0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
}

type filterPart struct {
	blocks [][filterBlockWords]uint32
	keys   atomic.Int64 // keys added to this part
	limit  int64        // keys it is sized for
}

func newFilterPart(keys int64) *filterPart {
	n := max((keys+filterKeysPerBlk-1)/filterKeysPerBlk, 1)
	return &filterPart{blocks: make([][filterBlockWords]uint32, n), limit: n * filterKeysPerBlk}
}

func (p *filterPart) block(h uint64) *[filterBlockWords]uint32 {
	hi, _ := bits.Mul64(h, uint64(len(p.blocks)))
	return &p.blocks[hi]
}

func (p *filterPart) has(h uint64) bool {
	b := p.block(h)
	lo := uint32(h) | 1
	for i := range filterBlockWords {
		if atomic.LoadUint32(&b[i])&(1<<((lo*filterSalts[i])>>27)) == 0 {
			return false
		}
	}
	return true
}

func (p *filterPart) add(h uint64) {
	b := p.block(h)
	lo := uint32(h) | 1
	for i := range filterBlockWords {
		atomic.OrUint32(&b[i], 1<<((lo*filterSalts[i])>>27))
	}
}

type keyFilter struct {
	ready  atomic.Bool // the scan at open has finished
	parts  atomic.Pointer[[]*filterPart]
	mu     sync.Mutex // serializes growth
	bytes  int64      // of all parts; guarded by mu
	budget int64
}

func newKeyFilter(expect, budget int64) *keyFilter {
	return newKeyFilterFrom(max(expect, minFilterKeys), budget)
}

// newKeyFilterFrom starts the chain with a filter sized for first keys.
func newKeyFilterFrom(first, budget int64) *keyFilter {
	f := &keyFilter{budget: budget}
	part := newFilterPart(first)
	if size := int64(len(part.blocks)) * filterBlockWords * 4; size > budget {
		part = newFilterPart(max(budget/(filterBlockWords*4), 1) * filterKeysPerBlk)
	}
	f.bytes = int64(len(part.blocks)) * filterBlockWords * 4
	f.parts.Store(&[]*filterPart{part})
	return f
}

// absent reports whether the key of hash h is certainly not in Pebble.
func (f *keyFilter) absent(h uint64) bool {
	if f == nil || !f.ready.Load() {
		return false
	}
	return !f.mayHave(*f.parts.Load(), h)
}

func (f *keyFilter) mayHave(parts []*filterPart, h uint64) bool {
	for i := len(parts) - 1; i >= 0; i-- {
		if parts[i].has(h) {
			return true
		}
	}
	return false
}

// add records that the key of hash h is (about to be) in Pebble.
func (f *keyFilter) add(h uint64) {
	parts := *f.parts.Load()
	if f.mayHave(parts, h) {
		return // bits are never cleared: it stays a positive
	}
	last := parts[len(parts)-1]
	last.add(h)
	if last.keys.Add(1) == last.limit {
		f.grow(last)
	}
}

// grow adds a part twice the size of full, the last one, if the budget
// allows; otherwise full keeps taking keys.
func (f *keyFilter) grow(full *filterPart) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := *f.parts.Load()
	if parts[len(parts)-1] != full {
		return
	}
	next := newFilterPart(2 * full.limit)
	size := int64(len(next.blocks)) * filterBlockWords * 4
	if f.bytes+size > f.budget {
		return
	}
	f.bytes += size
	grown := append(parts[:len(parts):len(parts)], next)
	f.parts.Store(&grown)
}

// size returns the bytes the filter holds.
func (f *keyFilter) size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes
}

// expectedTableKeys estimates the table rows in the store from the size of
// their key range on disk, so that the filter starts large enough.
func expectedTableKeys(pdb *pebble.DB) int64 {
	n, err := pdb.EstimateDiskUsage([]byte{byte(FamilyTable)}, []byte{byte(FamilyTable) + 1})
	if err != nil {
		return 0
	}
	return int64(n / 24)
}

// loadKeyFilter adds every table row in Pebble to the filter and marks it
// ready; it runs in the background from Open and gives up when the DB
// closes (the filter then stays unready, which is always correct).
func (db *DB) loadKeyFilter() {
	defer db.bg.Done()
	if err := db.enter(); err != nil {
		return
	}
	defer db.exit()
	it, err := db.pdb.NewIter(&pebble.IterOptions{
		LowerBound: []byte{byte(FamilyTable)},
		UpperBound: []byte{byte(FamilyTable) + 1},
	})
	if err != nil {
		db.log.Warn("state: key filter: cannot scan the table rows; absent keys are read from Pebble", "err", err)
		return
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if n++; n%4096 == 0 && db.closed.Load() {
			_ = it.Close()
			return
		}
		db.filter.add(db.hash(it.Key()))
	}
	if err := it.Close(); err != nil {
		db.log.Warn("state: key filter: scan of the table rows failed; absent keys are read from Pebble", "err", err)
		return
	}
	db.filter.ready.Store(true)
}
