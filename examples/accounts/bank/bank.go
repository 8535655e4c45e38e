// Package bank is the domain of strand's accounts example: the bank account
// of the ordering seed (docs/design.md §2), kept small and importable so that the
// example program, its tests and the benchmarks share one definition.
//
// Four event types, keyed by AccountID:
//
//	AccountOpened  tag 1  Acquire   NonAssociative   opens (or re-opens) an account
//	Deposited      tag 2  Relaxed   algebra.Sum      deposits of a run fold into one
//	Withdrawn      tag 3  Relaxed   NonAssociative   may pass deposits of its segment
//	AccountClosed  tag 4  Release   NonAssociative   pays the balance out
//
// One topology (NewTopology) projects them into the "balances" table of
// Account values (NewTopologyWithHourly adds "deposits-hourly", deposits per
// account per hour, a window table). Workload generates a seeded, reproducible stream of valid
// events (Zipf-skewed accounts); Reference folds a log sequentially, one
// event at a time in log order, which is what every balance must equal
// after the processor's concurrent, reordered and reduced execution.
//
// Payloads are JSON by default; Binary declarations use hand-written
// binary layouts (stream.Binary) for speed. The codec is part of the
// topology's name, so a store written with one codec refuses to open with
// the other.
package bank

import (
	"errors"
	"fmt"
	"time"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// Type tags of the bank events.
const (
	TagOpened    planner.Tag = 1
	TagDeposited planner.Tag = 2
	TagWithdrawn planner.Tag = 3
	TagClosed    planner.Tag = 4
)

// Default names of the example's Iggy stream and topics.
const (
	Stream   = "bank"
	Topic    = "accounts"
	DLQTopic = "accounts.dlq"
)

// Codec names a payload encoding of the bank events and of the Account
// table values.
type Codec string

const (
	// JSON is the default: stream.JSON payloads, readable with any tool.
	JSON Codec = "json"
	// Binary uses the types' AppendBinary / UnmarshalBinary (stream.Binary).
	Binary Codec = "binary"
)

// ParseCodec returns the codec named s ("json" or "binary").
func ParseCodec(s string) (Codec, error) {
	switch Codec(s) {
	case JSON, Binary:
		return Codec(s), nil
	}
	return "", fmt.Errorf("bank: unknown codec %q, want json or binary", s)
}

// Events holds the four declarations of one codec. The same declarations
// serve the publisher (they are stream.Encoders) and the topology.
type Events struct {
	Codec       Codec
	Opened      *stream.Event[AccountID, AccountOpened]
	Deposits    *stream.Event[AccountID, Deposited]
	Withdrawals *stream.Event[AccountID, Withdrawn]
	Closed      *stream.Event[AccountID, AccountClosed]
	// Sequenced: every type is declared with stream.WithSequence (the events'
	// Seq fields), and NewTopology turns the re-sequencer on.
	Sequenced bool
}

var (
	jsonEvents = &Events{
		Codec:       JSON,
		Opened:      stream.Declare[AccountID, AccountOpened](TagOpened, stream.WithFence(planner.Acquire)),
		Deposits:    stream.Declare[AccountID, Deposited](TagDeposited, stream.WithReduce(algebra.Sum(DepositAmount, WithDepositAmount))),
		Withdrawals: stream.Declare[AccountID, Withdrawn](TagWithdrawn),
		Closed:      stream.Declare[AccountID, AccountClosed](TagClosed, stream.WithFence(planner.Release)),
	}
	binaryEvents = &Events{
		Codec: Binary,
		Opened: stream.Declare[AccountID, AccountOpened](TagOpened, stream.WithFence(planner.Acquire),
			stream.WithPayload(stream.Binary[AccountOpened]())),
		Deposits: stream.Declare[AccountID, Deposited](TagDeposited, stream.WithReduce(algebra.Sum(DepositAmount, WithDepositAmount)),
			stream.WithPayload(stream.Binary[Deposited]())),
		Withdrawals: stream.Declare[AccountID, Withdrawn](TagWithdrawn,
			stream.WithPayload(stream.Binary[Withdrawn]())),
		Closed: stream.Declare[AccountID, AccountClosed](TagClosed, stream.WithFence(planner.Release),
			stream.WithPayload(stream.Binary[AccountClosed]())),
	}
)

// Declarations returns the event declarations of codec c (JSON for any
// unknown value). They are package-level values: immutable and shared.
// SequencedDeclarations returns the declarations of codec c with
// stream.WithSequence on every type: the publisher writes each event's Seq into
// its strand-seq header, and a topology of them (NewTopology) re-sequences
// the events of each account, so they may be published out of order.
func SequencedDeclarations(c Codec) *Events {
	if c == Binary {
		return binarySeqEvents
	}
	return jsonSeqEvents
}

var (
	jsonSeqEvents   = sequenced(JSON)
	binarySeqEvents = sequenced(Binary)
)

func sequenced(c Codec) *Events {
	var opened, deposits, withdrawals, closed []stream.Option
	if c == Binary {
		opened = append(opened, stream.WithPayload(stream.Binary[AccountOpened]()))
		deposits = append(deposits, stream.WithPayload(stream.Binary[Deposited]()))
		withdrawals = append(withdrawals, stream.WithPayload(stream.Binary[Withdrawn]()))
		closed = append(closed, stream.WithPayload(stream.Binary[AccountClosed]()))
	}
	return &Events{
		Codec: c, Sequenced: true,
		Opened: stream.Declare[AccountID, AccountOpened](TagOpened,
			append(opened, stream.WithFence(planner.Acquire), stream.WithSequence(AccountOpened.SeqNo))...),
		Deposits: stream.Declare[AccountID, Deposited](TagDeposited,
			append(deposits, stream.WithReduce(algebra.Sum(DepositAmount, WithDepositAmount)), stream.WithSequence(Deposited.SeqNo))...),
		Withdrawals: stream.Declare[AccountID, Withdrawn](TagWithdrawn,
			append(withdrawals, stream.WithSequence(Withdrawn.SeqNo))...),
		Closed: stream.Declare[AccountID, AccountClosed](TagClosed,
			append(closed, stream.WithFence(planner.Release), stream.WithSequence(AccountClosed.SeqNo))...),
	}
}

func Declarations(c Codec) *Events {
	if c == Binary {
		return binaryEvents
	}
	return jsonEvents
}

// Envelope encodes any bank event with its declaration, ready to publish.
func (ev *Events) Envelope(e Event) (stream.Envelope, error) {
	switch e := e.(type) {
	case AccountOpened:
		return ev.Opened.Envelope(e)
	case Deposited:
		return ev.Deposits.Envelope(e)
	case Withdrawn:
		return ev.Withdrawals.Envelope(e)
	case AccountClosed:
		return ev.Closed.Envelope(e)
	}
	return stream.Envelope{}, fmt.Errorf("bank: encode: unknown event type %T", e)
}

// ErrUnknownType is wrapped by Decode's error for a type tag that is not a
// bank event.
var ErrUnknownType = errors.New("bank: unknown type tag")

// Decode decodes a payload by its type tag.
func (ev *Events) Decode(tag planner.Tag, payload []byte) (Event, error) {
	var (
		e   Event
		err error
	)
	switch tag {
	case TagOpened:
		e, err = ev.Opened.Decode(payload)
	case TagDeposited:
		e, err = ev.Deposits.Decode(payload)
	case TagWithdrawn:
		e, err = ev.Withdrawals.Decode(payload)
	case TagClosed:
		e, err = ev.Closed.Decode(payload)
	default:
		return nil, fmt.Errorf("%w %d", ErrUnknownType, tag)
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// TopologyName returns the name of the topology of codec c: "accounts-json"
// or "accounts-binary". The codec is part of it (and so of the store's
// fingerprint) because the table values are encoded with the same codec.
func TopologyName(c Codec) string { return "accounts-" + string(Declarations(c).Codec) }

// NewTopology returns the accounts topology for the events of ev read from
// the source named source ("stream/topic", as iggy.Source.Name reports),
// and its "balances" table. Build it with Build; after the processor
// attached the table to its store, Get and Scan read it.
func NewTopology(ev *Events, source string, opts ...topology.Option) (*topology.Topology, *topology.Table[AccountID, Account]) {
	t, balances, _ := newTopology(ev, source, false, opts...)
	return t, balances
}

// NewTopologyWithHourly is NewTopology with a second, windowed read model:
// "deposits-hourly", the deposits of each account per hour of the records'
// broker timestamps (tumbling windows of an hour, topology.MessageTime).
// An hour is final once a later record of its partition came (no grace: a
// partition's timestamps only grow); closed hours are kept for a day.
// Query it with Get(ctx, account, hourStart) or Range.
func NewTopologyWithHourly(ev *Events, source string, opts ...topology.Option) (*topology.Topology, *topology.Table[AccountID, Account], *topology.WindowTable[AccountID, int64]) {
	return newTopology(ev, source, true, opts...)
}

func newTopology(ev *Events, source string, hourly bool, opts ...topology.Option) (*topology.Topology, *topology.Table[AccountID, Account], *topology.WindowTable[AccountID, int64]) {
	t := topology.New(TopologyName(ev.Codec), opts...)
	src := topology.Source[AccountID](t, source)
	if ev.Sequenced {
		src.Resequence() // wait for missing numbers; drop duplicates
	}
	var values stream.Codec[Account] = stream.JSON[Account]()
	if ev.Codec == Binary {
		values = stream.Binary[Account]()
	}
	balances := topology.NewTable[AccountID, Account](t, "balances", values)
	topology.Project(topology.On(src, ev.Opened), balances, ApplyOpened)
	topology.Project(topology.On(src, ev.Deposits), balances, ApplyDeposited)
	topology.Project(topology.On(src, ev.Withdrawals), balances, ApplyWithdrawn)
	topology.Project(topology.On(src, ev.Closed), balances, ApplyClosed)
	if !hourly {
		return t, balances, nil
	}
	perHour := topology.NewWindowTable[AccountID, int64](t, "deposits-hourly", topology.Tumbling(time.Hour), stream.JSON[int64]())
	topology.Aggregate(topology.On(src, ev.Deposits), perHour, topology.MessageTime[Deposited](),
		func(sum *int64, e Deposited) error { *sum += e.Amount; return nil })
	return t, balances, perHour
}
