package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/queryserver"
)

// InstanceFlag is the runner's flag that makes it one processor instance
// of the scale-out measurements: ServeInstance runs the accounts topology
// as an App (one instance of a group, or alone), with a query server, and
// reports its progress on stdout until stdin is closed.
const InstanceFlag = "scaleout-instance"

// InstanceConfig configures one instance process (the value of
// InstanceFlag, as JSON).
type InstanceConfig struct {
	// Broker is the broker's address.
	Broker string `json:"broker"`
	// Dir is the instance's state directory.
	Dir string `json:"dir"`
	// Name names the instance in the group and in its log.
	Name string `json:"name"`
	// Codec of the accounts workload.
	Codec workload.Codec `json:"codec"`
	// Group makes the App an instance of the topology's group
	// (topology.WithGroup); without it the App processes every partition
	// alone, with no changelog.
	Group bool `json:"group"`
	// Session is the group's session timeout (iggy.WithSessionTimeout; 0:
	// the connector's default, 10s).
	Session time.Duration `json:"session"`
	// SnapshotEvery is topology.WithSnapshotEvery (-1: the default).
	SnapshotEvery int `json:"snapshot_every"`
	// StatusEvery is how often a STATUS line is printed.
	StatusEvery time.Duration `json:"status_every"`
	// Router is "own" (a router over the group's membership written
	// here) or "default" (the query server's default router).
	Router string `json:"router"`
	// LogFile, when set, receives the App's log (info level).
	LogFile string `json:"log_file,omitempty"`
}

// InstanceStatus is one STATUS line of an instance process.
type InstanceStatus struct {
	// T is when it was taken (Unix nanoseconds).
	T int64 `json:"t"`
	// CPU is the process's user + system CPU time so far (nanoseconds).
	CPU int64 `json:"cpu"`
	// Parts holds one entry per partition of the source.
	Parts []PartStatus `json:"parts"`
	// Member is the instance's member id in its group (0 outside one or
	// before it joined).
	Member uint64 `json:"member,omitempty"`
}

// PartStatus is one partition in an InstanceStatus.
type PartStatus struct {
	// Phase is the topology.Phase.
	Phase topology.Phase `json:"phase"`
	// Epoch of the ownership.
	Epoch uint64 `json:"epoch,omitempty"`
	// Next is the committed checkpoint, for a Serving partition.
	Next uint64 `json:"next,omitempty"`
	// The last restore (topology.RestoreProgress).
	Took     time.Duration `json:"took,omitempty"`
	Applied  int           `json:"applied,omitempty"`
	Snapshot bool          `json:"snapshot,omitempty"`
	Reused   bool          `json:"reused,omitempty"`
	Done     bool          `json:"done,omitempty"`
	From     uint64        `json:"from,omitempty"`
	End      uint64        `json:"end,omitempty"`
}

// Lines of an instance process's stdout: "READY <query address>" once,
// then "STATUS <json>" lines.
const (
	readyPrefix  = "READY "
	statusPrefix = "STATUS "
)

// groupStream is the Iggy stream of the accounts topic, where the group's
// membership log and the changelog live.
const groupStream = iggyStream

// ServeInstance is the body of the runner's InstanceFlag mode: it runs
// the instance config describes (JSON) until stdin is closed or ctx ends,
// then leaves the group and closes the App.
func ServeInstance(ctx context.Context, config string, stdin io.Reader, stdout io.Writer) error {
	var cfg InstanceConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		return fmt.Errorf("scaleout instance: config: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	log := quietLogger()
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		log = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", cfg.Name)
	}
	inst, err := openInstance(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer inst.close()
	out := bufio.NewWriter(stdout)
	if _, err := fmt.Fprintf(out, "%s%s\n", readyPrefix, inst.addr); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	every := cfg.StatusEvery
	if every <= 0 {
		every = 10 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return inst.stop()
		case err := <-inst.runErr:
			if err == nil {
				err = errors.New("Run returned")
			}
			return fmt.Errorf("scaleout instance %s: %w", cfg.Name, err)
		case err := <-inst.serveErr:
			return fmt.Errorf("scaleout instance %s: query server: %w", cfg.Name, err)
		case <-tick.C:
		}
		b, err := json.Marshal(inst.status())
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "%s%s\n", statusPrefix, b); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// instance is a running App with its query server.
type instance struct {
	cl       *iggy.Client
	app      *topology.App
	qs       *queryserver.Server
	addr     string
	parts    uint32
	cancel   context.CancelFunc
	runErr   chan error
	serveErr chan error
	wg       sync.WaitGroup
	stopped  bool
}

// openInstance connects to the broker, opens the App and starts Run and
// the query server (on a free loopback port, announced to the group).
func openInstance(ctx context.Context, cfg InstanceConfig, log *slog.Logger) (*instance, error) {
	cl, err := iggy.Connect(ctx, cfg.Broker, iggy.WithCredentials("iggy", "iggy"), iggy.WithLogger(quietLogger()))
	if err != nil {
		return nil, err
	}
	parts, err := cl.Partitions(ctx, iggyStream, iggyTopic)
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	addr := ln.Addr().String()
	topo, balances := bank.NewTopology(bank.Declarations(bank.Codec(cfg.Codec)), workload.Source)
	opts := []topology.OpenOption{topology.WithLogger(log)}
	if cfg.Group {
		var gopts []iggy.GroupOption
		if cfg.Session > 0 {
			gopts = append(gopts, iggy.WithSessionTimeout(cfg.Session))
		}
		gopts = append(gopts, iggy.WithMemberName(cfg.Name), iggy.WithGroupLogger(log))
		opts = append(opts, topology.WithGroup(cl.Group(groupStream, gopts...)), topology.WithQueryAddr(addr))
		if cfg.SnapshotEvery >= 0 {
			opts = append(opts, topology.WithSnapshotEvery(cfg.SnapshotEvery))
		}
	}
	app, err := topology.Open(ctx, topo, cl, cfg.Dir, opts...)
	if err != nil {
		_ = ln.Close()
		_ = cl.Close()
		return nil, err
	}
	qopts := []queryserver.Option{queryserver.WithTable(balances), queryserver.WithLogger(log)}
	if cfg.Group && cfg.Router != "default" {
		qopts = append(qopts, queryserver.WithRouter(GroupRouter(app)))
	}
	qs, err := queryserver.New(app, qopts...)
	if err != nil {
		_ = app.Close()
		_ = ln.Close()
		_ = cl.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in := &instance{cl: cl, app: app, qs: qs, addr: addr, parts: parts, cancel: cancel,
		runErr: make(chan error, 1), serveErr: make(chan error, 1)}
	in.wg.Go(func() { in.runErr <- app.Run(runCtx) })
	in.wg.Go(func() {
		if err := qs.Serve(runCtx, ln); err != nil && runCtx.Err() == nil {
			in.serveErr <- err
		}
	})
	return in, nil
}

// GroupRouter routes a query by the group's membership: a partition this
// App serves is local, one another member owns goes to the query address
// it announced, anything else (restoring here, no owner, no address yet)
// is unavailable for a second.
func GroupRouter(app *topology.App) queryserver.Router {
	return queryserver.RouterFunc(func(_ context.Context, q queryserver.Query) queryserver.Route {
		switch app.Phase(q.Partition) {
		case topology.Serving:
			return queryserver.Route{Kind: queryserver.Local}
		case topology.Restoring:
			return queryserver.Route{Kind: queryserver.Unavailable, RetryAfter: time.Second,
				Reason: fmt.Sprintf("partition %d is restoring", q.Partition)}
		}
		m := app.Membership()
		if m == nil {
			return queryserver.Route{Kind: queryserver.Unavailable, RetryAfter: time.Second, Reason: "not in the group (yet)"}
		}
		owner, _, ok := m.Owner(q.Partition)
		if !ok || owner.Addr == "" || owner.ID == m.ID() {
			return queryserver.Route{Kind: queryserver.Unavailable, RetryAfter: time.Second,
				Reason: fmt.Sprintf("partition %d has no owner that serves queries", q.Partition)}
		}
		return queryserver.Route{Kind: queryserver.Remote, Owner: owner.Addr}
	})
}

// status reads the App's state.
func (in *instance) status() InstanceStatus {
	st := InstanceStatus{T: time.Now().UnixNano(), CPU: int64(sysstat.CPUTime()), Parts: make([]PartStatus, in.parts)}
	if m := in.app.Membership(); m != nil {
		st.Member = uint64(m.ID())
	}
	own := map[uint32]topology.PartitionStatus{}
	for _, ps := range in.app.Ownership() {
		own[ps.Partition] = ps
	}
	for p := range in.parts {
		ps := &st.Parts[p]
		ps.Phase = in.app.Phase(p)
		if o, ok := own[p]; ok {
			r := o.Restore
			ps.Epoch, ps.Took, ps.Applied, ps.Snapshot, ps.Reused, ps.Done, ps.From, ps.End =
				uint64(o.Epoch), r.Took, r.Applied, r.Snapshot, r.Reused, r.Done, r.From, r.End
		}
		if ps.Phase == topology.Serving {
			if next, ok, err := in.app.Checkpoint(workload.Source, p); err == nil && ok {
				ps.Next = next
			}
		}
	}
	return st
}

// stop stops Run (the instance leaves its group) and the query server.
func (in *instance) stop() error {
	if in.stopped {
		return nil
	}
	in.stopped = true
	in.cancel()
	in.wg.Wait()
	select {
	case err := <-in.runErr:
		return stoppedErr(err)
	default:
		return nil
	}
}

func (in *instance) close() {
	_ = in.stop()
	_ = in.qs.Close()
	_ = in.app.Close()
	_ = in.cl.Close()
}
