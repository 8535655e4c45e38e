package iggy

import (
	"context"
	"slices"

	"github.com/strand-io/strand/stream/connector"
)

// group is the connector.Group that Client.Group returns.
type group struct {
	cl     *Client
	stream string
	opts   []GroupOption
}

var _ connector.Group = (*group)(nil)

// Group returns the connector.Group whose members share partitions through a
// membership log in the Iggy stream streamName (see JoinGroup: the log is
// streamName/"strand-members-<topology>" unless WithMembershipTopic says
// otherwise); the front door takes it with topology.WithGroup. opts
// configure every membership it makes; they are checked by Join, which
// reports an invalid one with an error naming the option.
//
// Join(ctx, topology, partitions, addr) is JoinGroup(ctx, streamName,
// topology, partitions, opts..., WithQueryAddr(addr)): the member
// announces addr (empty: no address), whatever a WithQueryAddr among opts
// says. The Membership it returns is a *Membership.
func (c *Client) Group(streamName string, opts ...GroupOption) connector.Group {
	return &group{cl: c, stream: streamName, opts: slices.Clone(opts)}
}

// Join joins the group as a new member (Client.JoinGroup).
func (g *group) Join(ctx context.Context, topology string, partitions uint32, addr string) (connector.Membership, error) {
	opts := append(slices.Clip(g.opts), WithQueryAddr(addr))
	m, err := g.cl.JoinGroup(ctx, g.stream, topology, partitions, opts...)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return m, nil
}
