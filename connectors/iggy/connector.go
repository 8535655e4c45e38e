package iggy

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/strand-io/strand/stream/connector"
)

var _ connector.Connector = (*Client)(nil)

// splitTopic splits a topology's topic name, "stream/topic".
func splitTopic(name string) (stream, topic string, err error) {
	s, t, ok := strings.Cut(name, "/")
	if !ok || s == "" || t == "" {
		return "", "", fmt.Errorf("strand: iggy: topic name %q: want \"stream/topic\"", name)
	}
	return s, t, nil
}

// OpenSource returns the Source of the topic named "stream/topic", which
// must exist; it makes the Client a connector.Connector, the way a topology's
// App (package topology) reaches Iggy. The Source has the options given to
// Connect with WithSourceOptions.
func (c *Client) OpenSource(ctx context.Context, name string) (connector.Source, error) {
	s, t, err := splitTopic(name)
	if err != nil {
		return nil, err
	}
	if _, err := c.Partitions(ctx, s, t); err != nil {
		return nil, err
	}
	return NewSource(c, s, t, c.cfg.sourceOpts...)
}

// OpenSink returns a Sink publishing to the topic named "stream/topic",
// creating the stream and the topic (with the given partition count) when
// missing; an existing topic keeps its own partition count. The Sink implements connector.SentChecker, so the App publishes
// dead letters exactly once across crashes.
func (c *Client) OpenSink(ctx context.Context, name string, partitions uint32) (connector.Sink, error) {
	s, t, err := splitTopic(name)
	if err != nil {
		return nil, err
	}
	if _, err := c.Partitions(ctx, s, t); err != nil {
		// Missing (or unreachable: EnsureTopic says which): create it.
		if err := c.EnsureTopic(ctx, s, t, partitions); err != nil {
			return nil, err
		}
	}
	// The runtime hands a sink rounds of up to thousands of messages in
	// one Send: a linger of a millisecond lets each partition's batch fill
	// with the whole round instead of leaving with its first message.
	opts := []PublisherOption{WithLinger(time.Millisecond), WithConnections(int(max(1, min(partitions, 4))))}
	if dir := c.cfg.sessionLogDir; dir != "" {
		opts = append(opts, WithSessionLog(filepath.Join(dir, url.PathEscape(s)+"."+url.PathEscape(t)+".sessions")))
	}
	return NewSink(ctx, c, s, t, opts...)
}
