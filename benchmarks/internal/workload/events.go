// Package workload is the accounts workload of strand's benchmarks (issues 5
// and 6), built on the example's domain (examples/accounts/bank: its events,
// declarations, topology and fold): a Zipf-skewed event generator with the
// issues' mix (90% deposits and withdrawals, 10% opens and closes with
// their Acquire and Release fences), the pre-encoded log it fills, and the
// sequential reference every run is checked against.
//
// It is benchmark machinery, not API.
package workload

import (
	"fmt"
	"strconv"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// AccountID is the key of every event and of the balances table.
type AccountID = bank.AccountID

// Account is the value of the balances table.
type Account = bank.Account

// Codec names a payload (and table value) encoding.
type Codec string

// The codecs measured.
const (
	Binary Codec = Codec(bank.Binary)
	JSON   Codec = Codec(bank.JSON)
)

// ParseCodec parses "binary" or "json".
func ParseCodec(s string) (Codec, error) {
	c, err := bank.ParseCodec(s)
	return Codec(c), err
}

// Decls are the bank declarations of one codec and the codec of the
// balances table's values (the same one, as bank.NewTopology uses).
type Decls struct {
	Codec  Codec
	Events *bank.Events
	Values stream.Codec[Account]
}

// NewDecls returns the declarations of codec c.
func NewDecls(c Codec) Decls {
	d := Decls{Codec: c, Events: bank.Declarations(bank.Codec(c)), Values: stream.JSON[Account]()}
	if c == Binary {
		d.Values = stream.Binary[Account]()
	}
	return d
}

// Kind says which of the four events a generated event is.
type Kind uint8

// The event kinds.
const (
	KindOpened Kind = iota + 1
	KindDeposited
	KindWithdrawn
	KindClosed
)

// Event is one generated event, before encoding.
type Event struct {
	Kind    Kind
	Account AccountID
	Amount  int64
}

// Bank returns the bank event e stands for.
func (e Event) Bank() (bank.Event, error) {
	switch e.Kind {
	case KindOpened:
		return bank.AccountOpened{Account: e.Account, Owner: owner(e.Account)}, nil
	case KindDeposited:
		return bank.Deposited{Account: e.Account, Amount: e.Amount}, nil
	case KindWithdrawn:
		return bank.Withdrawn{Account: e.Account, Amount: e.Amount}, nil
	case KindClosed:
		return bank.AccountClosed{Account: e.Account}, nil
	}
	return nil, fmt.Errorf("workload: unknown event kind %d", e.Kind)
}

func owner(id AccountID) string { return "owner-" + strconv.FormatUint(uint64(id), 10) }

// appendEvent appends e's key bytes and then its payload to dst and
// returns the headers it carries (Key left nil) and the key's length.
func (d Decls) appendEvent(dst []byte, e Event) ([]byte, connector.Headers, int, error) {
	ev := d.Events
	start := len(dst)
	dst, err := ev.Opened.KeyCodec().Append(dst, e.Account) // one key codec for all four
	if err != nil {
		return dst, connector.Headers{}, 0, err
	}
	keyLen := len(dst) - start
	var h connector.Headers
	switch e.Kind {
	case KindOpened:
		h = connector.Headers{Tag: bank.TagOpened, Ordering: ev.Opened.Ordering(bank.AccountOpened{}), Algebra: ev.Opened.Algebra().Kind()}
		dst, err = ev.Opened.PayloadCodec().Append(dst, bank.AccountOpened{Account: e.Account, Owner: owner(e.Account)})
	case KindDeposited:
		h = connector.Headers{Tag: bank.TagDeposited, Ordering: ev.Deposits.Ordering(bank.Deposited{}), Algebra: ev.Deposits.Algebra().Kind()}
		dst, err = ev.Deposits.PayloadCodec().Append(dst, bank.Deposited{Account: e.Account, Amount: e.Amount})
	case KindWithdrawn:
		h = connector.Headers{Tag: bank.TagWithdrawn, Ordering: ev.Withdrawals.Ordering(bank.Withdrawn{}), Algebra: ev.Withdrawals.Algebra().Kind()}
		dst, err = ev.Withdrawals.PayloadCodec().Append(dst, bank.Withdrawn{Account: e.Account, Amount: e.Amount})
	case KindClosed:
		h = connector.Headers{Tag: bank.TagClosed, Ordering: ev.Closed.Ordering(bank.AccountClosed{}), Algebra: ev.Closed.Algebra().Kind()}
		dst, err = ev.Closed.PayloadCodec().Append(dst, bank.AccountClosed{Account: e.Account})
	default:
		err = fmt.Errorf("workload: unknown event kind %d", e.Kind)
	}
	return dst, h, keyLen, err
}

// Apply decodes one payload of type tag tag with the declarations' codec and
// folds it into a: what a naive consumer does per event.
func (d Decls) Apply(a *Account, tag planner.Tag, payload []byte) error {
	e, err := d.Events.Decode(tag, payload)
	if err != nil {
		return err
	}
	return bank.Apply(a, e)
}
