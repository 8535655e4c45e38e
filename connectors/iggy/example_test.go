package iggy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"strconv"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

type Deposited struct {
	Account uint64 `json:"account"`
	Amount  int64  `json:"amount"`
}

// depositEncoder stands in for a stream declaration: it gives each event
// its strand headers and JSON body.
type depositEncoder struct{}

func (depositEncoder) Envelope(d Deposited) (stream.Envelope, error) {
	body, err := json.Marshal(d)
	return stream.Envelope{
		Headers: connector.Headers{Key: []byte(strconv.FormatUint(d.Account, 10)), Tag: 2, Ordering: planner.Relaxed, Algebra: algebra.Associative},
		Payload: body,
	}, err
}

// Publish events to a topic and read them back from one partition, against
// the embedded broker (point Connect at a real Iggy 0.8 server the same
// way).
func Example() {
	srv, err := iggytest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	c, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.EnsureTopic(ctx, "bank", "accounts", 4); err != nil {
		log.Fatal(err)
	}

	pub, err := iggy.NewPublisher(ctx, c, "bank", "accounts")
	if err != nil {
		log.Fatal(err)
	}
	for _, amount := range []int64{100, -30, 5} {
		if err := iggy.Publish(ctx, pub, depositEncoder{}, Deposited{Account: 42, Amount: amount}); err != nil {
			log.Fatal(err)
		}
	}
	if err := pub.Close(ctx); err != nil {
		log.Fatal(err)
	}

	// Account 42's events are all in one partition, in order.
	src, err := iggy.NewSource(c, "bank", "accounts")
	if err != nil {
		log.Fatal(err)
	}
	r, err := src.Open(ctx, pub.PartitionOf([]byte("42")), 0)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Poll(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, rec := range recs {
		fmt.Printf("offset %d key %s tag %d: %s\n", rec.Offset, rec.Headers.Key, rec.Headers.Tag, rec.Payload)
	}
	// Output:
	// offset 0 key 42 tag 2: {"account":42,"amount":100}
	// offset 1 key 42 tag 2: {"account":42,"amount":-30}
	// offset 2 key 42 tag 2: {"account":42,"amount":5}
}
