package iggy_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

// Two instances of a topology share its four partitions: each learns what
// it gains on Assignments, and either can tell who serves a partition.
func ExampleClient_JoinGroup() {
	srv, err := iggytest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	quiet := iggy.WithLogger(slog.New(slog.DiscardHandler))

	join := func(name string) (*iggy.Client, *iggy.Membership) {
		c, err := iggy.Connect(ctx, srv.Addr(), quiet)
		if err != nil {
			log.Fatal(err)
		}
		m, err := c.JoinGroup(ctx, "bank", "accounts", 4,
			iggy.WithSessionTimeout(2*time.Second), iggy.WithMemberName(name), iggy.WithQueryAddr(name+":8080"))
		if err != nil {
			log.Fatal(err)
		}
		// A real engine starts a partition on Gained, stops it on Revoking
		// and then calls HandBack, and stops it at once on Lost.
		go func() {
			for a := range m.Assignments() {
				if a.Kind == iggy.Revoking {
					_ = m.HandBack(ctx, a.Partition)
				}
			}
		}()
		return c, m
	}
	ca, a := join("a")
	defer ca.Close()
	defer a.Close()
	cb, b := join("b")
	defer cb.Close()
	defer b.Close()

	for len(a.Owned()) != 2 || len(b.Owned()) != 2 {
		time.Sleep(time.Millisecond)
	}
	for p := uint32(0); p < 4; p++ {
		owner, _, _ := b.Owner(p)
		fmt.Printf("partition %d: %s\n", p, owner.Addr)
	}
	// Output:
	// partition 0: a:8080
	// partition 1: a:8080
	// partition 2: b:8080
	// partition 3: b:8080
}
