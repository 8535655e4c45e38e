package workload

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/internal/xxh32"
	"github.com/strand-io/strand/stream/connector"
)

// Packed is a workload held for the scale scenario: the generator's events,
// 8 bytes each, split by partition in offset order, plus the sequential
// reference as one dense row per account id. Both live outside the Go heap
// (anonymous memory mappings), so that the input neither counts towards the
// heap the garbage collector paces itself by nor shows in heap figures: what
// the heap and resident memory grow by while the input is processed is the
// processing's own. Records encodes a batch on demand, into a buffer the
// caller reuses, so the encoded log never exists as a whole.
type Packed struct {
	Config  Config
	Decls   Decls
	parts   [][]packedEvent
	ref     []refAccount // by account id
	maps    [][]byte
	mix     Mix
	touched int
}

// packedEvent is one generated event.
type packedEvent struct {
	account uint32
	amount  uint16
	kind    Kind
	_       uint8
}

// refAccount is the reference state of one account (bank.Account without
// the strings, which follow from the id and the status).
type refAccount struct {
	balance, deposited, withdrawn, paidOut, openings int64
	status                                           uint8 // 0 never opened, 1 open, 2 closed
}

// offHeap maps n zeroed elements of a pointer-free T outside the Go heap.
// Pages that are never written take no memory.
func offHeap[T any](n int) ([]T, []byte, error) {
	size := max(n, 1) * int(unsafe.Sizeof(*new(T)))
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, nil, fmt.Errorf("workload: map %d bytes: %w", size, err)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), b, nil
}

// Pack generates cfg's events (in the order Generator gives them), routes
// each to its key's partition (XXH32 of the encoded key, as Iggy's
// messages-key partitioning does) and folds them into the reference.
func Pack(cfg Config, decls Decls) (*Packed, error) {
	g, err := NewGenerator(cfg)
	if err != nil {
		return nil, err
	}
	p := &Packed{Config: cfg, Decls: decls, parts: make([][]packedEvent, cfg.Partitions)}
	ok := false
	defer func() {
		if !ok {
			_ = p.Close()
		}
	}()
	full := make([][]packedEvent, cfg.Partitions)
	for i := range full {
		// Virtual room for every event in every partition; only what is
		// written becomes resident.
		s, m, err := offHeap[packedEvent](cfg.Events)
		if err != nil {
			return nil, err
		}
		full[i], p.maps = s, append(p.maps, m)
	}
	ref, m, err := offHeap[refAccount](cfg.Accounts + 1)
	if err != nil {
		return nil, err
	}
	p.ref, p.maps = ref, append(p.maps, m)
	codec := decls.Events.Opened.KeyCodec()
	var key []byte
	for i := range cfg.Events {
		e := g.Next()
		if key, err = codec.Append(key[:0], e.Account); err != nil {
			return nil, fmt.Errorf("workload: event %d: key: %w", i, err)
		}
		part := xxh32.Partition(key, cfg.Partitions)
		n := len(p.parts[part])
		full[part][n] = packedEvent{account: uint32(e.Account), amount: uint16(e.Amount), kind: e.Kind}
		p.parts[part] = full[part][:n+1]
		be, err := e.Bank()
		if err != nil {
			return nil, err
		}
		a := p.account(e.Account)
		if err := bank.Apply(&a, be); err != nil {
			return nil, fmt.Errorf("workload: event %d: reference: %w", i, err)
		}
		p.setAccount(a)
		p.mix.add(e.Kind)
	}
	p.touched = g.Accounts()
	ok = true
	return p, nil
}

// account returns the reference row of id as a bank.Account.
func (p *Packed) account(id AccountID) Account {
	r := &p.ref[id]
	a := Account{Balance: r.balance, Deposited: r.deposited, Withdrawn: r.withdrawn, PaidOut: r.paidOut, Openings: r.openings}
	switch r.status {
	case 1:
		a.Status = bank.StatusOpen
	case 2:
		a.Status = bank.StatusClosed
	}
	if r.status != 0 || r.deposited != 0 || r.withdrawn != 0 {
		a.ID = id
	}
	if r.openings > 0 {
		a.Owner = owner(id)
	}
	return a
}

func (p *Packed) setAccount(a Account) {
	r := &p.ref[a.ID]
	r.balance, r.deposited, r.withdrawn, r.paidOut, r.openings = a.Balance, a.Deposited, a.Withdrawn, a.PaidOut, a.Openings
	switch a.Status {
	case bank.StatusOpen:
		r.status = 1
	case bank.StatusClosed:
		r.status = 2
	default:
		r.status = 0
	}
}

// Close releases the memory. The Packed must not be used afterwards.
func (p *Packed) Close() error {
	var first error
	for _, m := range p.maps {
		if err := syscall.Munmap(m); err != nil && first == nil {
			first = fmt.Errorf("workload: unmap: %w", err)
		}
	}
	p.maps, p.parts, p.ref = nil, nil, nil
	return first
}

// Len returns the number of events.
func (p *Packed) Len() int {
	n := 0
	for _, s := range p.parts {
		n += len(s)
	}
	return n
}

// Partitions returns the partition count.
func (p *Packed) Partitions() uint32 { return uint32(len(p.parts)) }

// PartitionLen returns how many events partition part holds.
func (p *Packed) PartitionLen(part uint32) int { return len(p.parts[part]) }

// Touched returns how many accounts the events touch.
func (p *Packed) Touched() int { return p.touched }

// Mix returns the event mix.
func (p *Packed) Mix() Mix { return p.mix }

// Bytes returns the resident memory the input holds: the packed events and
// the reference rows.
func (p *Packed) Bytes() int64 {
	return int64(p.Len())*int64(unsafe.Sizeof(packedEvent{})) + int64(len(p.ref))*int64(unsafe.Sizeof(refAccount{}))
}

// Records appends to dst the records of partition part at offsets
// [from, from+n) (fewer at the end), encoding their keys and payloads into
// arena (which it empties first and may grow); the records alias the
// returned arena, which the caller may reuse once it is done with them.
func (p *Packed) Records(dst []connector.Record, arena []byte, part uint32, from, n int) ([]connector.Record, []byte, error) {
	evs := p.parts[part]
	end := min(from+n, len(evs))
	arena = arena[:0]
	first := len(dst)
	// arena may move while it grows: each record's Timestamp holds its
	// bytes' position (start << 16 | key length) until the loop below
	// turns positions into slices.
	for off := from; off < end; off++ {
		pe := evs[off]
		start := len(arena)
		var h connector.Headers
		var keyLen int
		var err error
		arena, h, keyLen, err = p.Decls.appendEvent(arena, Event{Kind: pe.kind, Account: AccountID(pe.account), Amount: int64(pe.amount)})
		if err != nil {
			return dst, arena, fmt.Errorf("workload: partition %d offset %d: %w", part, off, err)
		}
		dst = append(dst, connector.Record{Partition: part, Offset: uint64(off), Headers: h, Timestamp: uint64(start)<<16 | uint64(keyLen)})
	}
	for i := first; i < len(dst); i++ {
		r := &dst[i]
		start, keyLen := int(r.Timestamp>>16), int(r.Timestamp&0xffff)
		var end int
		if i+1 < len(dst) {
			end = int(dst[i+1].Timestamp >> 16)
		} else {
			end = len(arena)
		}
		r.Headers.Key = arena[start : start+keyLen : start+keyLen]
		r.Payload = arena[start+keyLen : end : end]
		r.Timestamp = 0
	}
	return dst, arena, nil
}

// Verify reads a store's accounts through scan and compares them with the
// reference: every touched account present and equal, nothing else. It
// names up to five differences.
func (p *Packed) Verify(scan func(fn func(AccountID, Account) bool) error) error {
	var diffs []string
	rows := 0
	err := scan(func(id AccountID, got Account) bool {
		rows++
		if id == 0 || uint64(id) >= uint64(len(p.ref)) {
			diffs = append(diffs, fmt.Sprintf("account %d is not in the workload", id))
		} else if want := p.account(id); want != got {
			diffs = append(diffs, fmt.Sprintf("account %d: got %+v, want %+v", id, got, want))
		}
		return len(diffs) < 5
	})
	if err != nil {
		return err
	}
	if len(diffs) == 0 && rows != p.touched {
		diffs = append(diffs, fmt.Sprintf("%d accounts in the store, %d touched", rows, p.touched))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("workload: the store differs from the reference: %v", diffs)
	}
	return nil
}
