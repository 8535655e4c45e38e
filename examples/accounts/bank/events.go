package bank

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// AccountID identifies an account: the key of every bank event. Its key
// bytes are 8 bytes big-endian (stream.Uint64Key), so table scans list
// accounts in numeric order.
type AccountID uint64

// Event is one of the four bank events: *not* a union the processor sees
// (it sees each type through its own declaration), but what the workload
// generator produces and the reference fold applies, in log order.
type Event interface {
	// Key returns the account the event belongs to.
	Key() AccountID
	bankEvent()
}

// AccountOpened opens an account, or re-opens a closed one. It is an
// Acquire fence: nothing of the account after it may be applied before it.
type AccountOpened struct {
	Account AccountID `json:"account"`
	Owner   string    `json:"owner"`
	// Seq is the event's number within its account (1-based) when the
	// producer publishes sequenced events (SequencedDeclarations), else 0.
	Seq uint64 `json:"seq,omitempty"`
}

// Deposited adds Amount (in cents, > 0) to an open account. It is Relaxed
// and its runs fold by sum (algebra.Sum): n deposits of one key in one
// segment become one deposit of their total.
type Deposited struct {
	Account AccountID `json:"account"`
	Amount  int64     `json:"amount"`
	// Seq: see AccountOpened.Seq.
	Seq uint64 `json:"seq,omitempty"`
}

// Withdrawn takes Amount (in cents, > 0) from an open account. It is
// Relaxed and NonAssociative: each withdrawal is applied on its own, but it
// may pass deposits of the same segment, because the projection only adds
// signed amounts (the overdraft check ran on the command side, before the
// event was published).
type Withdrawn struct {
	Account AccountID `json:"account"`
	Amount  int64     `json:"amount"`
	// Seq: see AccountOpened.Seq.
	Seq uint64 `json:"seq,omitempty"`
}

// AccountClosed closes an account and pays its balance out. It is a
// Release fence: every earlier deposit and withdrawal of the account is
// applied before it.
type AccountClosed struct {
	Account AccountID `json:"account"`
	// Seq: see AccountOpened.Seq.
	Seq uint64 `json:"seq,omitempty"`
}

// Key returns the account.
func (e AccountOpened) Key() AccountID { return e.Account }

// Key returns the account.
func (e Deposited) Key() AccountID { return e.Account }

// Key returns the account.
func (e Withdrawn) Key() AccountID { return e.Account }

// Key returns the account.
func (e AccountClosed) Key() AccountID { return e.Account }

// SeqNo returns the event's sequence number (0: unsequenced).
func (e AccountOpened) SeqNo() uint64 { return e.Seq }

// SeqNo returns the event's sequence number (0: unsequenced).
func (e Deposited) SeqNo() uint64 { return e.Seq }

// SeqNo returns the event's sequence number (0: unsequenced).
func (e Withdrawn) SeqNo() uint64 { return e.Seq }

// SeqNo returns the event's sequence number (0: unsequenced).
func (e AccountClosed) SeqNo() uint64 { return e.Seq }

// WithSeq returns e with sequence number seq.
func WithSeq(e Event, seq uint64) Event {
	switch e := e.(type) {
	case AccountOpened:
		e.Seq = seq
		return e
	case Deposited:
		e.Seq = seq
		return e
	case Withdrawn:
		e.Seq = seq
		return e
	case AccountClosed:
		e.Seq = seq
		return e
	}
	return e
}

func (AccountOpened) bankEvent() {}
func (Deposited) bankEvent()     {}
func (Withdrawn) bankEvent()     {}
func (AccountClosed) bankEvent() {}

// DepositAmount returns d's amount, for algebra.Sum.
func DepositAmount(d Deposited) int64 { return d.Amount }

// WithDepositAmount returns d with amount n, for algebra.Sum.
func WithDepositAmount(d Deposited, n int64) Deposited { d.Amount = n; return d }

// ErrBinary is wrapped by the errors of the binary encodings below.
var ErrBinary = errors.New("bank: bad binary encoding")

// Binary layouts (for stream.Binary): the account as u64 big-endian, then
// the fields in order: amounts as i64 big-endian, strings as a uvarint
// length and the bytes, then, only when Seq is not 0, Seq as u64
// big-endian. Decoding refuses other trailing or missing bytes, so a
// payload of another layout (or JSON) is undecodable, never misread.

// AppendBinary appends e's binary form.
func (e AccountOpened) AppendBinary(dst []byte) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Account))
	dst = binary.AppendUvarint(dst, uint64(len(e.Owner)))
	return appendSeq(append(dst, e.Owner...), e.Seq), nil
}

func appendSeq(dst []byte, seq uint64) []byte {
	if seq == 0 {
		return dst
	}
	return binary.BigEndian.AppendUint64(dst, seq)
}

// cutSeq splits a trailing sequence number off b when b is n+8 bytes.
func cutSeq(b []byte, n int) ([]byte, uint64) {
	if len(b) == n+8 {
		return b[:n], binary.BigEndian.Uint64(b[n:])
	}
	return b, 0
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *AccountOpened) UnmarshalBinary(b []byte) error {
	if len(b) < 9 {
		return fmt.Errorf("%w: AccountOpened is %d bytes, want at least 9", ErrBinary, len(b))
	}
	n, k := binary.Uvarint(b[8:])
	if k <= 0 || n > uint64(len(b)) {
		return fmt.Errorf("%w: AccountOpened owner length does not match its %d bytes", ErrBinary, len(b))
	}
	b, seq := cutSeq(b, 8+k+int(n))
	if uint64(len(b)-8-k) != n {
		return fmt.Errorf("%w: AccountOpened owner length does not match its %d bytes", ErrBinary, len(b))
	}
	e.Account = AccountID(binary.BigEndian.Uint64(b))
	e.Owner = string(b[8+k:])
	e.Seq = seq
	return nil
}

func appendAmount(dst []byte, a AccountID, amount int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(a))
	return binary.BigEndian.AppendUint64(dst, uint64(amount))
}

func readAmount(b []byte, what string) (AccountID, int64, uint64, error) {
	b, seq := cutSeq(b, 16)
	if len(b) != 16 {
		return 0, 0, 0, fmt.Errorf("%w: %s is %d bytes, want 16 (or 24 with a sequence number)", ErrBinary, what, len(b))
	}
	return AccountID(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])), seq, nil
}

// AppendBinary appends e's binary form (16 bytes).
func (e Deposited) AppendBinary(dst []byte) ([]byte, error) {
	return appendSeq(appendAmount(dst, e.Account, e.Amount), e.Seq), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *Deposited) UnmarshalBinary(b []byte) (err error) {
	e.Account, e.Amount, e.Seq, err = readAmount(b, "Deposited")
	return err
}

// AppendBinary appends e's binary form (16 bytes).
func (e Withdrawn) AppendBinary(dst []byte) ([]byte, error) {
	return appendSeq(appendAmount(dst, e.Account, e.Amount), e.Seq), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *Withdrawn) UnmarshalBinary(b []byte) (err error) {
	e.Account, e.Amount, e.Seq, err = readAmount(b, "Withdrawn")
	return err
}

// AppendBinary appends e's binary form (8 bytes).
func (e AccountClosed) AppendBinary(dst []byte) ([]byte, error) {
	return appendSeq(binary.BigEndian.AppendUint64(dst, uint64(e.Account)), e.Seq), nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (e *AccountClosed) UnmarshalBinary(b []byte) error {
	b, seq := cutSeq(b, 8)
	if len(b) != 8 {
		return fmt.Errorf("%w: AccountClosed is %d bytes, want 8 (or 16 with a sequence number)", ErrBinary, len(b))
	}
	e.Account = AccountID(binary.BigEndian.Uint64(b))
	e.Seq = seq
	return nil
}
