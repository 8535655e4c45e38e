package queryserver

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// RouteKind says where a table partition is served.
type RouteKind uint8

const (
	// Local: this instance serves the partition from its own App. The zero
	// Route is local.
	Local RouteKind = iota
	// Remote: another instance owns the partition; Route.Owner is its query
	// address.
	Remote
	// Unavailable: nobody can serve the partition right now (its state is
	// restoring, its owner is changing); the client should retry after
	// Route.RetryAfter.
	Unavailable
)

// String returns "local", "remote" or "unavailable".
func (k RouteKind) String() string {
	switch k {
	case Local:
		return "local"
	case Remote:
		return "remote"
	case Unavailable:
		return "unavailable"
	}
	return fmt.Sprintf("RouteKind(%d)", uint8(k))
}

// Query is what a Router is asked about: one partition of one table, and
// for a get the key's bytes.
type Query struct {
	// Table is the table's name.
	Table string
	// Partition is the partition the key's rows are filed under,
	// connector.PartitionOf(Key, Partitions); for a scan, each partition in
	// turn.
	Partition uint32
	// Partitions is the table's partition count (topology.Table.Partitions).
	Partitions uint32
	// Key is the key's bytes as the table's key codec writes them; nil when
	// a scan asks about a whole partition.
	Key []byte
}

// Route is a Router's answer.
type Route struct {
	Kind RouteKind
	// Owner is, for Remote, the owner's query address: "host:port" (plain
	// HTTP) or a base URL ("https://host:port/prefix") under which the
	// owner's Server is mounted.
	Owner string
	// RetryAfter is, for Unavailable, when to try again (the Retry-After
	// header; rounded up to whole seconds, at least 1).
	RetryAfter time.Duration
	// Epoch is, for Local in a group, the epoch under which this instance
	// owns the partition (HeaderEpoch); 0 outside a group.
	Epoch connector.Epoch
	// Reason is, for Unavailable, why (it goes into the error text):
	// "partition 3 is restoring", say.
	Reason string
}

// Router decides where each table partition is served. It is asked once per
// get and once per partition per scan page, so it should answer from
// memory. It must be safe for concurrent use.
type Router interface {
	Route(ctx context.Context, q Query) Route
}

// RouterFunc adapts a function to a Router.
type RouterFunc func(ctx context.Context, q Query) Route

// Route calls f.
func (f RouterFunc) Route(ctx context.Context, q Query) Route { return f(ctx, q) }

// LocalRouter serves every partition locally.
func LocalRouter() Router {
	return RouterFunc(func(context.Context, Query) Route { return Route{Kind: Local} })
}

// appRouter is the default. In group mode (the App was opened with
// topology.WithGroup and has joined: App.Membership is not nil) it routes
// by the group's membership (groupRouter). Otherwise the partitions app
// processes are local; the others are in no store here, and without a
// router nobody knows where they are, so they are unavailable rather than
// answered 404.
func appRouter(app *topology.App) Router {
	return RouterFunc(func(_ context.Context, q Query) Route {
		if m := app.Membership(); m != nil {
			return groupRoute(app.Phase, m, q)
		}
		if app.Processes(q.Partition) {
			return Route{Kind: Local}
		}
		return Route{Kind: Unavailable, RetryAfter: unownedRetry,
			Reason: fmt.Sprintf("this instance does not process partition %d (not one of its topology.WithPartitions, or it has not joined its group yet) and was given no queryserver.WithRouter to find its owner", q.Partition)}
	})
}

// Retry-After of the default router's unavailable answers.
const (
	// unownedRetry: a partition no instance processes or owns, or whose
	// owner announced no address; a client should come back in a while.
	unownedRetry = 5 * time.Second
	// movingRetry: a partition being restored or handed over; a restore
	// takes seconds, a hand-over less than a session timeout.
	movingRetry = time.Second
)

// groupRoute routes q by the group's membership m, phase being this
// instance's phase of each partition (App.Phase):
//
//   - Serving here, and the membership still grants it here
//     (Membership.Owns: this member's lease holds): Local. A partition
//     this instance no longer owns is not answered from its store, even
//     while the App is still stopping it.
//   - Restoring here: Unavailable, "partition N is restoring".
//   - Owned by another member with a query address: Remote to it.
//   - Otherwise Unavailable: nobody owns it yet, the group grants it to
//     this instance which has not started restoring it (or is giving it
//     up), its owner announced no query address, or the owner is an
//     earlier incarnation of this very instance (same address) that the
//     group has not declared dead yet.
//
// It never answers Local for a partition this instance does not serve,
// so a key is never answered 404 from a store that does not hold it.
func groupRoute(phase func(uint32) topology.Phase, m connector.Membership, q Query) Route {
	p := q.Partition
	switch phase(p) {
	case topology.Serving:
		if epoch, owned := m.Owns(p); owned {
			return Route{Kind: Local, Epoch: epoch}
		}
	case topology.Restoring:
		return Route{Kind: Unavailable, RetryAfter: movingRetry, Reason: fmt.Sprintf("partition %d is restoring", p)}
	}
	owner, epoch, ok := m.Owner(p)
	if !ok {
		return Route{Kind: Unavailable, RetryAfter: movingRetry,
			Reason: fmt.Sprintf("partition %d has no owner (the group is assigning it)", p)}
	}
	self := m.ID()
	if owner.ID == self {
		return Route{Kind: Unavailable, RetryAfter: movingRetry,
			Reason: fmt.Sprintf("partition %d is changing hands at this instance (epoch %d)", p, epoch)}
	}
	if owner.Addr == "" {
		return Route{Kind: Unavailable, RetryAfter: unownedRetry,
			Reason: fmt.Sprintf("partition %d: owner has no query address (member %d, %s, was opened without topology.WithQueryAddr)", p, owner.ID, owner.Name)}
	}
	if self != 0 {
		for _, mb := range m.Members() {
			if mb.ID == self && mb.Addr == owner.Addr {
				return Route{Kind: Unavailable, RetryAfter: movingRetry,
					Reason: fmt.Sprintf("partition %d is owned by member %d, an earlier incarnation of this instance (same query address %s) that the group has not yet declared dead", p, owner.ID, owner.Addr)}
			}
		}
	}
	return Route{Kind: Remote, Owner: owner.Addr}
}

// StaticRouter routes by a fixed map from partition to the query address
// of its owner, the same map for every instance: partitions whose owner is
// self are served locally, those of other owners are Remote, and a
// partition missing from the map is Unavailable ("no owner"). It fits
// instances opened with disjoint topology.WithPartitions; every table is
// routed by the same map. owners is copied.
func StaticRouter(self string, owners map[uint32]string) Router {
	m := maps.Clone(owners)
	return RouterFunc(func(_ context.Context, q Query) Route {
		owner, ok := m[q.Partition]
		switch {
		case !ok:
			return Route{Kind: Unavailable, RetryAfter: unownedRetry,
				Reason: fmt.Sprintf("partition %d has no owner in the static routing table", q.Partition)}
		case owner == self:
			return Route{Kind: Local}
		}
		return Route{Kind: Remote, Owner: owner}
	})
}
