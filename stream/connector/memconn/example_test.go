package memconn_test

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
)

// A broker in memory: a sink publishes to a topic, a source reads it back
// from an offset, with its strand headers parsed.
func Example() {
	ctx := context.Background()
	b, err := memconn.New()
	if err != nil {
		panic(err)
	}
	sink, err := b.OpenSink(ctx, "bank/accounts", 2) // created with 2 partitions
	if err != nil {
		panic(err)
	}
	h := connector.Headers{Key: []byte("account-7"), Tag: 1, Ordering: planner.Relaxed, Algebra: algebra.NonAssociative}
	fields, err := h.AppendFields(nil)
	if err != nil {
		panic(err)
	}
	for _, amount := range []string{"10", "20", "30"} {
		if err := sink.Send(ctx, []connector.Message{{Key: h.Key, Headers: fields, Payload: []byte(amount)}}); err != nil {
			panic(err)
		}
	}
	src, err := b.OpenSource(ctx, "bank/accounts")
	if err != nil {
		panic(err)
	}
	p := connector.PartitionOf(h.Key, 2)
	r, err := src.Open(ctx, p, 1) // from offset 1
	if err != nil {
		panic(err)
	}
	defer r.Close()
	recs, err := r.Poll(ctx, 10)
	if err != nil {
		panic(err)
	}
	for _, rec := range recs {
		fmt.Printf("offset %d key %s tag %d payload %s\n", rec.Offset, rec.Headers.Key, rec.Headers.Tag, rec.Payload)
	}
	// Output:
	// offset 1 key account-7 tag 1 payload 20
	// offset 2 key account-7 tag 1 payload 30
}
