package topologytest

import (
	"context"

	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/state"
)

// newBroker returns the in-memory broker a Driver runs its App over: the
// topology's sources, each of parts partitions, whose records readers see
// only once Step releases them, stamped by the driver's clock. Topics of
// one broker are created in the order of the sources, so their identities
// (connector.Identifier) are the same for every Driver of the topology,
// and a store reopened by another Driver (Dir) accepts them.
func newBroker(parts uint32, sources []string, c *clock) (*memconn.Broker, error) {
	b, err := memconn.New(memconn.WithManualDelivery(), memconn.WithClock(c.Now))
	if err != nil {
		return nil, err
	}
	for _, n := range sources {
		if _, err := b.CreateTopic(n, parts); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// resume makes the topics stand for the log a store in dir was built from
// (see Dir): each partition reports at least the store's checkpoint as its
// end. A directory without a store changes nothing.
func resume(b *memconn.Broker, dir string) {
	st, err := state.Open(context.Background(), dir)
	if err != nil {
		return // no store yet: the App creates it
	}
	defer st.Close()
	sources, err := st.Sources(context.Background())
	if err != nil {
		return
	}
	for _, src := range sources {
		t := b.Topic(src.Name)
		if t == nil {
			continue
		}
		for p, next := range src.Checkpoints {
			t.SetEndFloor(uint32(p), next)
		}
	}
}
