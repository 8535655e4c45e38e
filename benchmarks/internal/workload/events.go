// Package workload is the accounts workload of strand's benchmarks (issues 5
// and 6): the bank-account events of seed 000 (opened with an Acquire fence,
// deposits folding by sum, withdrawals, closed with a Release fence), their
// declarations for the binary and the JSON codec, the balances topology, a
// Zipf-skewed event generator, the pre-encoded log it fills, and the
// sequential reference every run is checked against.
//
// It is benchmark machinery, not API: examples/accounts is the user-facing
// version of the same model.
package workload

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

// AccountID is the key of every event and of the balances table.
type AccountID uint64

// Type tags, as in the seed's worked example.
const (
	TagOpened    planner.Tag = 1
	TagDeposited planner.Tag = 2
	TagWithdrawn planner.Tag = 3
	TagClosed    planner.Tag = 4
)

var errShort = errors.New("workload: short binary payload")

// Opened opens (or re-opens) an account: an Acquire fence, nothing of the
// account may be applied before it.
type Opened struct {
	Account AccountID `json:"account"`
}

// Key returns the account.
func (e Opened) Key() AccountID { return e.Account }

// AppendBinary appends the 8-byte little-endian account id.
func (e Opened) AppendBinary(b []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(b, uint64(e.Account)), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *Opened) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("%w: Opened has %d bytes, want 8", errShort, len(b))
	}
	e.Account = AccountID(binary.LittleEndian.Uint64(b))
	return nil
}

// Closed closes an account: a Release fence, every earlier deposit and
// withdrawal is applied first.
type Closed struct {
	Account AccountID `json:"account"`
}

// Key returns the account.
func (e Closed) Key() AccountID { return e.Account }

// AppendBinary appends the 8-byte little-endian account id.
func (e Closed) AppendBinary(b []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(b, uint64(e.Account)), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *Closed) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("%w: Closed has %d bytes, want 8", errShort, len(b))
	}
	e.Account = AccountID(binary.LittleEndian.Uint64(b))
	return nil
}

// Deposited adds Amount to the balance; runs of deposits fold by sum.
type Deposited struct {
	Account AccountID `json:"account"`
	Amount  int64     `json:"amount"`
}

// Key returns the account.
func (e Deposited) Key() AccountID { return e.Account }

// AppendBinary appends account id and amount, 8 bytes little-endian each.
func (e Deposited) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, uint64(e.Account))
	return binary.LittleEndian.AppendUint64(b, uint64(e.Amount)), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *Deposited) UnmarshalBinary(b []byte) error {
	if len(b) != 16 {
		return fmt.Errorf("%w: Deposited has %d bytes, want 16", errShort, len(b))
	}
	e.Account = AccountID(binary.LittleEndian.Uint64(b))
	e.Amount = int64(binary.LittleEndian.Uint64(b[8:]))
	return nil
}

// Withdrawn subtracts Amount from the balance; NonAssociative, applied one
// by one (the seed's example).
type Withdrawn struct {
	Account AccountID `json:"account"`
	Amount  int64     `json:"amount"`
}

// Key returns the account.
func (e Withdrawn) Key() AccountID { return e.Account }

// AppendBinary appends account id and amount, 8 bytes little-endian each.
func (e Withdrawn) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, uint64(e.Account))
	return binary.LittleEndian.AppendUint64(b, uint64(e.Amount)), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *Withdrawn) UnmarshalBinary(b []byte) error {
	if len(b) != 16 {
		return fmt.Errorf("%w: Withdrawn has %d bytes, want 16", errShort, len(b))
	}
	e.Account = AccountID(binary.LittleEndian.Uint64(b))
	e.Amount = int64(binary.LittleEndian.Uint64(b[8:]))
	return nil
}

// Account is the value of the balances table.
type Account struct {
	Balance int64  `json:"balance"`
	Open    bool   `json:"open"`
	Opens   uint32 `json:"opens"` // how many times the account was opened
}

// AppendBinary appends balance (8 bytes), open (1) and opens (4).
func (a Account) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, uint64(a.Balance))
	o := byte(0)
	if a.Open {
		o = 1
	}
	b = append(b, o)
	return binary.LittleEndian.AppendUint32(b, a.Opens), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (a *Account) UnmarshalBinary(b []byte) error {
	if len(b) != 13 {
		return fmt.Errorf("%w: Account has %d bytes, want 13", errShort, len(b))
	}
	a.Balance = int64(binary.LittleEndian.Uint64(b))
	a.Open = b[8] == 1
	a.Opens = binary.LittleEndian.Uint32(b[9:])
	return nil
}

// The folds of the balances projection; the reference and the naive
// baselines use the same functions.

// FoldOpened opens a.
func FoldOpened(a *Account, _ Opened) error { a.Open = true; a.Opens++; return nil }

// FoldDeposited adds e's amount.
func FoldDeposited(a *Account, e Deposited) error { a.Balance += e.Amount; return nil }

// FoldWithdrawn subtracts e's amount.
func FoldWithdrawn(a *Account, e Withdrawn) error { a.Balance -= e.Amount; return nil }

// FoldClosed closes a.
func FoldClosed(a *Account, _ Closed) error { a.Open = false; return nil }

// Codec names a payload (and table value) encoding.
type Codec string

// The codecs measured.
const (
	Binary Codec = "binary"
	JSON   Codec = "json"
)

// ParseCodec parses "binary" or "json".
func ParseCodec(s string) (Codec, error) {
	switch Codec(s) {
	case Binary, JSON:
		return Codec(s), nil
	}
	return "", fmt.Errorf("workload: unknown codec %q (want binary or json)", s)
}

// Decls are the four event declarations for one codec.
type Decls struct {
	Codec     Codec
	Opened    *stream.Event[AccountID, Opened]
	Deposited *stream.Event[AccountID, Deposited]
	Withdrawn *stream.Event[AccountID, Withdrawn]
	Closed    *stream.Event[AccountID, Closed]
	Values    stream.Codec[Account]
}

// NewDecls declares the events with payloads (and table values) in codec c.
func NewDecls(c Codec) Decls {
	sum := stream.Reduce(algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d }))
	if c == JSON {
		return Decls{
			Codec:     c,
			Opened:    stream.Declare[AccountID, Opened](TagOpened, stream.Fence(planner.Acquire)),
			Deposited: stream.Declare[AccountID, Deposited](TagDeposited, sum),
			Withdrawn: stream.Declare[AccountID, Withdrawn](TagWithdrawn),
			Closed:    stream.Declare[AccountID, Closed](TagClosed, stream.Fence(planner.Release)),
			Values:    stream.JSON[Account](),
		}
	}
	return Decls{
		Codec:     Binary,
		Opened:    stream.Declare[AccountID, Opened](TagOpened, stream.Fence(planner.Acquire), stream.Payload(stream.Binary[Opened]())),
		Deposited: stream.Declare[AccountID, Deposited](TagDeposited, sum, stream.Payload(stream.Binary[Deposited]())),
		Withdrawn: stream.Declare[AccountID, Withdrawn](TagWithdrawn, stream.Payload(stream.Binary[Withdrawn]())),
		Closed:    stream.Declare[AccountID, Closed](TagClosed, stream.Fence(planner.Release), stream.Payload(stream.Binary[Closed]())),
		Values:    stream.Binary[Account](),
	}
}

// Envelope encodes one generated event with the declarations.
func (d Decls) Envelope(e Event) (stream.Envelope, error) {
	switch e.Kind {
	case KindOpened:
		return d.Opened.Envelope(Opened{Account: e.Account})
	case KindDeposited:
		return d.Deposited.Envelope(Deposited{Account: e.Account, Amount: e.Amount})
	case KindWithdrawn:
		return d.Withdrawn.Envelope(Withdrawn{Account: e.Account, Amount: e.Amount})
	case KindClosed:
		return d.Closed.Envelope(Closed{Account: e.Account})
	}
	return stream.Envelope{}, fmt.Errorf("workload: unknown event kind %d", e.Kind)
}

// appendEvent appends e's key bytes and then its payload to dst, without
// allocating, and returns the headers it would carry (Key left nil) and
// the key's length.
func (d Decls) appendEvent(dst []byte, e Event) ([]byte, stream.Headers, int, error) {
	start := len(dst)
	var h stream.Headers
	var err error
	appendKey := func(c stream.Codec[AccountID]) {
		dst, err = c.Append(dst, e.Account)
	}
	switch e.Kind {
	case KindOpened:
		appendKey(d.Opened.KeyCodec())
		h = stream.Headers{Tag: TagOpened, Ordering: d.Opened.Ordering(Opened{}), Algebra: d.Opened.Algebra().Kind()}
	case KindDeposited:
		appendKey(d.Deposited.KeyCodec())
		h = stream.Headers{Tag: TagDeposited, Ordering: d.Deposited.Ordering(Deposited{}), Algebra: d.Deposited.Algebra().Kind()}
	case KindWithdrawn:
		appendKey(d.Withdrawn.KeyCodec())
		h = stream.Headers{Tag: TagWithdrawn, Ordering: d.Withdrawn.Ordering(Withdrawn{}), Algebra: d.Withdrawn.Algebra().Kind()}
	case KindClosed:
		appendKey(d.Closed.KeyCodec())
		h = stream.Headers{Tag: TagClosed, Ordering: d.Closed.Ordering(Closed{}), Algebra: d.Closed.Algebra().Kind()}
	default:
		return dst, h, 0, fmt.Errorf("workload: unknown event kind %d", e.Kind)
	}
	if err != nil {
		return dst, h, 0, err
	}
	keyLen := len(dst) - start
	switch e.Kind {
	case KindOpened:
		dst, err = d.Opened.PayloadCodec().Append(dst, Opened{Account: e.Account})
	case KindDeposited:
		dst, err = d.Deposited.PayloadCodec().Append(dst, Deposited{Account: e.Account, Amount: e.Amount})
	case KindWithdrawn:
		dst, err = d.Withdrawn.PayloadCodec().Append(dst, Withdrawn{Account: e.Account, Amount: e.Amount})
	case KindClosed:
		dst, err = d.Closed.PayloadCodec().Append(dst, Closed{Account: e.Account})
	}
	return dst, h, keyLen, err
}

// Apply decodes one payload of type tag tag with the declarations' codec and
// folds it into a: what a naive consumer does per event.
func (d Decls) Apply(a *Account, tag planner.Tag, payload []byte) error {
	switch tag {
	case TagOpened:
		e, err := d.Opened.Decode(payload)
		if err != nil {
			return err
		}
		return FoldOpened(a, e)
	case TagDeposited:
		e, err := d.Deposited.Decode(payload)
		if err != nil {
			return err
		}
		return FoldDeposited(a, e)
	case TagWithdrawn:
		e, err := d.Withdrawn.Decode(payload)
		if err != nil {
			return err
		}
		return FoldWithdrawn(a, e)
	case TagClosed:
		e, err := d.Closed.Decode(payload)
		if err != nil {
			return err
		}
		return FoldClosed(a, e)
	}
	return fmt.Errorf("workload: unknown type tag %d", tag)
}
