package stream_test

import (
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
)

type Opened struct {
	Account AccountID
	Owner   string
}

func (o Opened) Key() AccountID { return o.Account }

// Example declares two event types and turns events into what a publisher
// sends (strand headers and an encoded payload) and what a consumer's
// executor reads back (a connector.Record, planned from its headers alone). Package
// topology consumes the same declarations.
func Example() {
	opened := stream.Declare[AccountID, Opened](1, stream.WithFence(planner.Acquire))
	deposits := stream.Declare[AccountID, Deposited](2, stream.WithReduce(algebra.Sum(
		func(d Deposited) int64 { return d.Amount },
		func(d Deposited, n int64) Deposited { d.Amount = n; return d })))

	env, err := opened.Envelope(Opened{Account: 42, Owner: "ada"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("opened: key %x, tag %d, %s\n", env.Headers.Key, env.Headers.Tag, env.Headers.Ordering)
	r, err := deposits.Record(0, 1, Deposited{Account: 42, Amount: 100})
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := deposits.Decode(r.Payload)
	fmt.Printf("deposit at offset %d: %s, %s, decoded %+v %v\n", r.Offset, r.Headers.Ordering, r.Headers.Algebra, d, err)
	// Output:
	// opened: key 000000000000002a, tag 1, Acquire
	// deposit at offset 1: Relaxed, Associative, decoded {Account:42 Amount:100} <nil>
}

// ExampleDeclare shows the envelope a publisher sends for one event.
func ExampleDeclare() {
	deposits := stream.Declare[AccountID, Deposited](2)
	env, err := deposits.Envelope(Deposited{Account: 7, Amount: 5})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("key %x tag %d %s %s payload %s\n", env.Headers.Key, env.Headers.Tag,
		env.Headers.Ordering, env.Headers.Algebra, env.Payload)
	// Output: key 0000000000000007 tag 2 Relaxed NonAssociative payload {"Account":7,"Amount":5}
}
