package deadletter_test

import (
	"errors"
	"fmt"

	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
)

// Example turns a dead letter into the message its topology publishes and
// reads it back as a consumer of the dead-letter topic does.
func Example() {
	d := deadletter.Letter{
		Source: "bank/accounts", Partition: 3, Offset: 41,
		Reason: deadletter.ReasonDecode, Err: errors.New("invalid character '}'"),
		Headers: connector.Headers{Key: []byte("acct-7"), Tag: 2, Ordering: planner.Relaxed},
		Payload: []byte(`{"amount":}`),
	}
	m := d.Message()
	back, err := deadletter.Parse(m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("key %s: %s\n", m.Key, back)
	fmt.Printf("payload %s, same id on a re-send: %v\n", back.Payload, m.ID == back.ID())
	// Output:
	// key acct-7: dead letter bank/accounts/3@41 (undecodable): invalid character '}'
	// payload {"amount":}, same id on a re-send: true
}
