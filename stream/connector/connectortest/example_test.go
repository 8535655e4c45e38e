package connectortest_test

import (
	"context"
	"testing"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/connectortest"
	"github.com/strand-io/strand/stream/connector/memconn"
)

// A connector's test runs the suite with a Harness that connects to its
// broker; here the in-memory one, which can also delete a topic so that
// the suite checks that a topic created again has another identity.
func ExampleRun() {
	_ = func(t *testing.T) { // in a connector's _test.go file: func TestConformance(t *testing.T)
		connectortest.Run(t, connectortest.Harness{
			Connect: func(t *testing.T) connector.Connector {
				b, err := memconn.New()
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			Delete: func(_ context.Context, c connector.Connector, topic string) error {
				return c.(*memconn.Broker).DeleteTopic(topic)
			},
		})
	}
}
