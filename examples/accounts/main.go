// Command accounts is strand's bank-account example: a read model of
// account balances kept exactly once in a local Pebble store from an Apache
// Iggy log, queryable over HTTP. With no flags it needs nothing installed:
//
//	go run ./examples/accounts
//
// starts an embedded Iggy broker (connectors/iggy/iggytest) on a fresh data
// directory under os.TempDir (removed at the end; -data DIR keeps and reuses
// one), creates the topic bank/accounts (8 partitions) and its dead-letter
// topic bank/accounts.dlq, publishes 200,000 events of 10,000 accounts with
// Zipf skew 1.1 plus 8 poison records, processes them with a
// stream.Processor, serves GET /tables/balances/{id} and
// GET /tables/balances?limit=N with strand's query server on
// 127.0.0.1:8080, shows progress once a second, and when the processor has
// caught up prints throughput, lag, dead letters and a check of every
// balance against a sequential fold of the log read back from the broker.
// It exits with status 1 if any balance or dead letter is wrong.
//
// The bank domain (events, declarations, topology, workload, reference
// fold) lives in package bank, next to this file.
//
// Roles (-role) split the same program over processes, as the crash test
// does:
//
//	all        broker (unless -iggy), producer, processor, HTTP, check (default)
//	broker     the embedded broker alone on -listen, until interrupted
//	producer   publish the workload to -iggy, then exit
//	processor  process -iggy into the store under -data and serve HTTP until
//	           interrupted; with -drain, exit once caught up; with -group,
//	           as one instance of a group that shares the partitions
//	check      compare the store under -data (or, with -query, the accounts
//	           served by a group through one instance) with the log of -iggy
//
// Scale-out: -role processor -group -instance I joins the group of the
// processors of the topology (through a membership log on Iggy): the
// group gives each partition to one instance at a time, every instance
// keeps its own store (state-I under -data) rebuilt from the partition's
// changelog on Iggy when it takes a partition over, and every instance's
// query server answers for every account, forwarding to the owner of its
// partition. -role all -instances N runs N such processors as child
// processes of this one (-kill-after D kills one of them mid-way) and
// checks every account through one instance's query server.
//
// With -iggy host:port (and -user, -password) every role uses a real Iggy
// 0.8 server instead of the embedded one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/strand-io/strand/examples/accounts/bank"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "accounts:", err)
		os.Exit(1)
	}
}

// config is the program's flags.
type config struct {
	role string

	events   int
	accounts int
	skew     float64
	rate     float64
	seed     uint64
	poison   int

	disorder, duplicates float64
	resequence           bool

	partitions    uint32
	dlqPartitions uint32
	codec         bank.Codec
	stream        string
	topic         string
	dlq           string

	data   string
	keep   bool
	nosync bool

	iggy     string
	protocol string
	user     string
	password string
	listen   string

	http       string
	httpPublic bool
	drain      bool
	backlog    bool
	serve      bool
	progress   time.Duration
	verbose    bool
	trace      bool

	// Scale-out.
	instances      int
	group          bool
	instance       int
	sessionTimeout time.Duration
	static         bool
	snapshotEvery  int
	standbys       int
	killAfter      time.Duration
	query          string
}

const usageText = `accounts: strand's bank-account example.

Usage: go run ./examples/accounts [flags]

With no flags it runs everything in one process on an embedded Iggy broker,
publishes 200,000 events, processes them, checks every balance against a
sequential fold of the log, prints throughput and exits.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("accounts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	w := bank.DefaultWorkload
	fs.StringVar(&c.role, "role", "all", "what to run: all, broker, producer, processor or check (see the package doc)")
	fs.IntVar(&c.events, "events", w.Events, "events to publish (0: publish until interrupted)")
	fs.IntVar(&c.accounts, "accounts", w.Accounts, "number of accounts")
	fs.Float64Var(&c.skew, "skew", w.Skew, "Zipf exponent s of the account popularity (<= 1: uniform)")
	fs.Float64Var(&c.rate, "rate", 0, "events per second to publish (0: as fast as the broker takes them)")
	fs.Uint64Var(&c.seed, "seed", w.Seed, "workload seed: equal seeds publish equal events")
	fs.IntVar(&c.poison, "poison", 8, "poison records (bad headers, undecodable, unknown type) to publish among the events; each must reach the dead-letter topic exactly once")
	fs.Float64Var(&c.disorder, "disorder", 0, "share (0..1) of each account's events to publish out of order, up to 64 events late, with sequence numbers; turns -resequence on")
	fs.Float64Var(&c.duplicates, "duplicates", 0.01, "with -disorder: share (0..1) of the events to publish a second time, later")
	fs.BoolVar(&c.resequence, "resequence", false, "sequenced events and the re-sequencer (implied by -disorder > 0; give it to every -role of one run)")
	parts := fs.Uint("partitions", 8, "partitions of the events topic")
	dlqParts := fs.Uint("dlq-partitions", 1, "partitions of the dead-letter topic")
	codec := fs.String("codec", string(bank.JSON), "payload codec: json or binary")
	fs.StringVar(&c.stream, "stream", bank.Stream, "Iggy stream")
	fs.StringVar(&c.topic, "topic", bank.Topic, "Iggy topic of the events")
	fs.StringVar(&c.dlq, "dlq", bank.DLQTopic, "Iggy topic of the dead letters (in the same stream)")
	fs.StringVar(&c.data, "data", "", "data directory: broker/ holds the embedded broker's log, state/ the Pebble store (state-N/ that of instance N of a group) (default: a fresh directory under "+os.TempDir()+", removed at exit)")
	fs.BoolVar(&c.keep, "keep", false, "keep the default data directory at exit")
	fs.BoolVar(&c.nosync, "nosync", false, "commit without fsync (faster; a machine crash may lose the last commits, a process crash loses nothing)")
	fs.StringVar(&c.iggy, "iggy", "", "address of an Iggy 0.10 or 0.8 server (host:port); empty: start the embedded broker")
	fs.StringVar(&c.protocol, "protocol", envOr("STRAND_IGGY_PROTOCOL", "auto"), "Iggy protocol: 0.10, 0.8 or auto (detect; env STRAND_IGGY_PROTOCOL)")
	fs.StringVar(&c.user, "user", "iggy", "Iggy user")
	fs.StringVar(&c.password, "password", "", "Iggy password (default: $"+passwordEnv+", or iggy)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8090", "address of the embedded broker in -role broker")
	fs.StringVar(&c.http, "http", "127.0.0.1:8080", "address of the query server and /metrics, a loopback one unless -http-public (empty: none; a busy port falls back to a free one)")
	fs.BoolVar(&c.httpPublic, "http-public", false, "allow an -http address that is not a loopback one (the query server authenticates nobody)")
	fs.BoolVar(&c.drain, "drain", false, "-role processor: exit once everything in the topic at start is processed and its dead letters are published")
	fs.BoolVar(&c.backlog, "backlog", false, "-role all: start the processor only once everything is published, to measure it alone on a backlog")
	fs.BoolVar(&c.serve, "serve", false, "-role all: keep serving HTTP after the check, until interrupted")
	fs.DurationVar(&c.progress, "progress", time.Second, "progress report interval (0: none)")
	fs.BoolVar(&c.verbose, "v", false, "verbose logs")
	fs.IntVar(&c.instances, "instances", 1, "-role all: run this many processor instances as child processes sharing the partitions (a group; see -group), and check every account through one instance's query server")
	fs.BoolVar(&c.group, "group", false, "-role processor: run as one instance of the group of processors that share the partitions (with -instance; see the package doc)")
	fs.IntVar(&c.instance, "instance", 1, "-role processor -group: this instance's number, which names its store (state-N under -data) and its member")
	fs.DurationVar(&c.sessionTimeout, "session-timeout", 5*time.Second, "-group: how long an instance may go silent before the others take its partitions over")
	fs.BoolVar(&c.static, "static", true, "-group: join with the stable instance id accounts-N (static membership): a restarted instance takes its partitions back at once instead of after the session timeout")
	fs.IntVar(&c.snapshotEvery, "snapshot-every", 200, "-group: commits of a partition between two snapshots of its state in its changelog (0: none; a restore then replays the whole changelog)")
	fs.IntVar(&c.standbys, "standbys", 0, "-group: standby copies of every partition kept by other instances (topology.WithStandbys): a failover then promotes one instead of restoring from the changelog")
	fs.DurationVar(&c.killAfter, "kill-after", 0, "-role all -instances N (N >= 2): SIGKILL the last instance this long after the processors start; the others take its partitions over (0: never)")
	fs.StringVar(&c.query, "query", "", "-role check: check the accounts through the query server at this address (host:port of any instance of a group) instead of a store under -data")
	fs.BoolVar(&c.trace, "trace", false, "print spans to stdout: the producer's publish spans (one per 10,000 events) and strand's process spans linked to them (metrics are always served at /metrics)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.password == "" {
		c.password = envOr(passwordEnv, "iggy")
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q (flags only; see -help)", fs.Args())
	}
	var err error
	if c.codec, err = bank.ParseCodec(*codec); err != nil {
		return c, err
	}
	switch c.role {
	case "all", "broker", "producer", "processor", "check":
	default:
		return c, fmt.Errorf("unknown -role %q: want all, broker, producer, processor or check", c.role)
	}
	if *parts < 1 || *parts > 1000 || *dlqParts < 1 || *dlqParts > 1000 {
		return c, fmt.Errorf("-partitions %d, -dlq-partitions %d: want 1..1000", *parts, *dlqParts)
	}
	c.partitions, c.dlqPartitions = uint32(*parts), uint32(*dlqParts)
	if c.events < 0 || c.poison < 0 || c.rate < 0 {
		return c, fmt.Errorf("-events %d, -poison %d, -rate %g: want >= 0", c.events, c.poison, c.rate)
	}
	if c.disorder < 0 || c.disorder > 1 || c.duplicates < 0 || c.duplicates > 1 {
		return c, fmt.Errorf("-disorder %g, -duplicates %g: want shares in 0..1", c.disorder, c.duplicates)
	}
	if c.disorder > 0 {
		c.resequence = true
	}
	if !c.resequence {
		c.duplicates = 0
	}
	if err := c.workload().Validate(); err != nil {
		return c, err
	}
	if (c.role == "producer" || c.role == "processor" || c.role == "check") && c.iggy == "" {
		return c, fmt.Errorf("-role %s needs -iggy host:port (start a broker with -role broker)", c.role)
	}
	if c.role == "check" && c.data == "" && c.query == "" {
		return c, errors.New("-role check needs -data (the directory of the processor's store) or -query (the query server of an instance of a group)")
	}
	return c, c.checkScaleOut()
}

// checkScaleOut refuses scale-out flags that do not fit the role.
func (c config) checkScaleOut() error {
	switch {
	case c.instances < 1 || c.instances > 16:
		return fmt.Errorf("-instances %d: want 1..16", c.instances)
	case c.instances > 1 && c.role != "all":
		return fmt.Errorf("-instances %d is for -role all (start -role processor -group once per instance otherwise)", c.instances)
	case c.instances > 1 && c.backlog:
		return errors.New("-instances and -backlog do not go together")
	case c.group && c.role != "processor":
		return errors.New("-group is for -role processor")
	case c.group && c.drain:
		return errors.New("-group and -drain do not go together: an instance of a group owns only some partitions; use -role check -query")
	case c.instance < 0 || c.instance > 9999:
		return fmt.Errorf("-instance %d: want 0..9999", c.instance)
	case c.sessionTimeout < 100*time.Millisecond:
		return fmt.Errorf("-session-timeout %v: want at least 100ms", c.sessionTimeout)
	case c.snapshotEvery < 0:
		return fmt.Errorf("-snapshot-every %d: want >= 0", c.snapshotEvery)
	case c.standbys < 0 || c.standbys > 16:
		return fmt.Errorf("-standbys %d: want 0..16", c.standbys)
	case c.killAfter < 0 || (c.killAfter > 0 && c.instances < 2):
		return fmt.Errorf("-kill-after %v: want a duration > 0 with -instances 2 or more", c.killAfter)
	case c.query != "" && c.role != "check":
		return errors.New("-query is for -role check")
	}
	if c.query != "" {
		if _, _, err := net.SplitHostPort(c.query); err != nil {
			return fmt.Errorf("-query %q: want host:port: %w", c.query, err)
		}
	}
	return nil
}

func (c config) workload() bank.Workload {
	return bank.Workload{Events: c.events, Accounts: c.accounts, Skew: c.skew, Seed: c.seed}
}

func (c config) source() string { return c.stream + "/" + c.topic }

// passwordEnv, when set, is the default of -password: how a -instances
// run hands the password to its instances without a command line that
// anyone on the machine can read.
const passwordEnv = "STRAND_IGGY_PASSWORD"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// stateDir is the store's directory under the data directory: state, or
// state-N for instance N of a group.
func (c config) stateDir() string {
	if c.group {
		return fmt.Sprintf("state-%d", c.instance)
	}
	return "state"
}
