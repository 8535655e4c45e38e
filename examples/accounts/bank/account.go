package bank

import (
	"encoding/binary"
	"fmt"
)

// Status is an account's state: open or closed ("" for an account that
// only ever saw deposits or withdrawals, which the workload never makes).
type Status string

const (
	// StatusOpen is the status after AccountOpened.
	StatusOpen Status = "open"
	// StatusClosed is the status after AccountClosed.
	StatusClosed Status = "closed"
)

// Account is the read model: the value of an account in the balances
// table, folded from its events. Every field is a function of the
// account's events that survives the processor's reordering and reduction:
// deposits and withdrawals only add signed amounts (so they commute, and n
// deposits fold into one), while opening and closing are fences.
type Account struct {
	ID     AccountID `json:"id"`
	Owner  string    `json:"owner"`
	Status Status    `json:"status"`
	// Balance is in cents. Closing pays it out and sets it to 0.
	Balance int64 `json:"balance"`
	// Deposited and Withdrawn are the totals ever deposited and withdrawn.
	Deposited int64 `json:"deposited"`
	Withdrawn int64 `json:"withdrawn"`
	// PaidOut is the total paid out by closings.
	PaidOut int64 `json:"paid_out"`
	// Openings counts AccountOpened events (re-openings included).
	Openings int64 `json:"openings"`
}

// ApplyOpened folds an AccountOpened into a.
func ApplyOpened(a *Account, e AccountOpened) error {
	a.ID, a.Owner, a.Status = e.Account, e.Owner, StatusOpen
	a.Openings++
	return nil
}

// ApplyDeposited folds a Deposited (possibly the sum of several) into a.
func ApplyDeposited(a *Account, e Deposited) error {
	a.ID = e.Account
	a.Balance += e.Amount
	a.Deposited += e.Amount
	return nil
}

// ApplyWithdrawn folds a Withdrawn into a. It does not refuse an
// overdraft: the balance may dip below zero while deposits of the same
// segment are still to be applied, and the final balance is right anyway.
func ApplyWithdrawn(a *Account, e Withdrawn) error {
	a.ID = e.Account
	a.Balance -= e.Amount
	a.Withdrawn += e.Amount
	return nil
}

// ApplyClosed folds an AccountClosed into a: the balance is paid out.
func ApplyClosed(a *Account, e AccountClosed) error {
	a.ID = e.Account
	a.PaidOut += a.Balance
	a.Balance = 0
	a.Status = StatusClosed
	return nil
}

// Apply folds any bank event into a: the sequential reference uses it, one
// event at a time in log order.
func Apply(a *Account, e Event) error {
	switch e := e.(type) {
	case AccountOpened:
		return ApplyOpened(a, e)
	case Deposited:
		return ApplyDeposited(a, e)
	case Withdrawn:
		return ApplyWithdrawn(a, e)
	case AccountClosed:
		return ApplyClosed(a, e)
	}
	return fmt.Errorf("bank: apply: unknown event type %T", e)
}

const accountVersion = 1

// AppendBinary appends a's binary form: a version byte, the id (u64 BE),
// the owner (uvarint length and bytes), the status (0 none, 1 open,
// 2 closed) and the five counters as varints.
func (a Account) AppendBinary(dst []byte) ([]byte, error) {
	dst = append(dst, accountVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.ID))
	dst = binary.AppendUvarint(dst, uint64(len(a.Owner)))
	dst = append(dst, a.Owner...)
	var st byte
	switch a.Status {
	case "":
	case StatusOpen:
		st = 1
	case StatusClosed:
		st = 2
	default:
		return dst, fmt.Errorf("%w: account %d has status %q", ErrBinary, a.ID, a.Status)
	}
	dst = append(dst, st)
	for _, v := range [...]int64{a.Balance, a.Deposited, a.Withdrawn, a.PaidOut, a.Openings} {
		dst = binary.AppendVarint(dst, v)
	}
	return dst, nil
}

// UnmarshalBinary reads what AppendBinary wrote.
func (a *Account) UnmarshalBinary(b []byte) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: account value (%d bytes): %s", ErrBinary, len(b), what)
	}
	if len(b) < 9 || b[0] != accountVersion {
		return bad("too short or unknown version")
	}
	a.ID = AccountID(binary.BigEndian.Uint64(b[1:]))
	rest := b[9:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return bad("owner")
	}
	a.Owner = string(rest[k : k+int(n)])
	rest = rest[k+int(n):]
	if len(rest) < 1 {
		return bad("status")
	}
	switch rest[0] {
	case 0:
		a.Status = ""
	case 1:
		a.Status = StatusOpen
	case 2:
		a.Status = StatusClosed
	default:
		return bad("status")
	}
	rest = rest[1:]
	for _, p := range [...]*int64{&a.Balance, &a.Deposited, &a.Withdrawn, &a.PaidOut, &a.Openings} {
		v, k := binary.Varint(rest)
		if k <= 0 {
			return bad("counters")
		}
		*p, rest = v, rest[k:]
	}
	if len(rest) != 0 {
		return bad("trailing bytes")
	}
	return nil
}
