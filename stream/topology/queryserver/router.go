package queryserver

import (
	"context"
	"fmt"
	"maps"
	"time"

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
	// stream.PartitionOf(Key, Partitions); for a scan, each partition in
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

// appRouter is the default: the partitions app processes are local; the
// others are in no store here, and without a router nobody knows where
// they are, so they are unavailable rather than answered 404.
func appRouter(app *topology.App) Router {
	return RouterFunc(func(_ context.Context, q Query) Route {
		if app.Processes(q.Partition) {
			return Route{Kind: Local}
		}
		return Route{Kind: Unavailable, RetryAfter: 5 * time.Second,
			Reason: fmt.Sprintf("this instance does not process partition %d (topology.WithPartitions) and was given no queryserver.WithRouter to find its owner", q.Partition)}
	})
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
			return Route{Kind: Unavailable, RetryAfter: 5 * time.Second,
				Reason: fmt.Sprintf("partition %d has no owner in the static routing table", q.Partition)}
		case owner == self:
			return Route{Kind: Local}
		}
		return Route{Kind: Remote, Owner: owner}
	})
}
