package iggy

import (
	"context"
	"fmt"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
)

var _ connector.Identifier = (*Source)(nil)

// Identity returns what tells this incarnation of the source's topic from
// a topic deleted and created again under the same name: the topic's id in
// its stream and its creation time (microseconds), as the server reports
// them, in one round trip on the client's admin connection. It makes Source
// a connector.Identifier: the front door stores it with the state and
// refuses to resume that state over another incarnation of the topic.
func (s *Source) Identity(ctx context.Context) (string, error) {
	d, err := topicDetails(ctx, s.cl.admin, s.t)
	if err != nil {
		return "", strerr.Errorf("strand: iggy: identity of %s: %w", s.t, err)
	}
	return topicIdentity(d.Id, d.CreatedAt), nil
}

func topicIdentity(id uint32, createdAt uint64) string {
	return fmt.Sprintf("iggy topic id %d created at %d µs", id, createdAt)
}
