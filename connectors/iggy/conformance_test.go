package iggy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/connectortest"
)

// TestConformance runs package connector's conformance suite against the
// Client, on the embedded broker (or the server of STRAND_IGGY_ADDR), in
// each protocol the Client speaks.
func TestConformance(t *testing.T) {
	for _, proto := range []Protocol{Protocol010, Protocol08} {
		t.Run(proto.String(), func(t *testing.T) {
			if env := testProtocol(); env != ProtocolAuto && env != proto {
				t.Skipf("STRAND_IGGY_PROTOCOL asks for %s", env)
			}
			tg := newTarget(t)
			connectortest.Run(t, connectortest.Harness{
				Connect: func(t *testing.T) connector.Connector {
					return tg.connect(t, WithProtocol(proto))
				},
				Topic: func(t *testing.T, name string) string {
					var b [4]byte
					_, _ = rand.Read(b[:])
					stream := "strand-conf-" + strings.ReplaceAll(name, "/", "-") + "-" + hex.EncodeToString(b[:])
					t.Cleanup(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						c, err := Connect(ctx, tg.addr, tg.options()...)
						if err != nil {
							return
						}
						defer c.Close()
						_ = c.DeleteStream(ctx, stream)
					})
					return stream + "/events"
				},
				Delete: func(ctx context.Context, c connector.Connector, topic string) error {
					s, _, err := splitTopic(topic)
					if err != nil {
						return err
					}
					return c.(*Client).DeleteStream(ctx, s)
				},
			})
		})
	}
}
