// Command iggy-embedded runs strand's embedded Iggy broker (package
// iggytest) as a development server that speaks Iggy server 0.8.0's TCP
// protocol, so that the official SDKs and strand's examples can be run with
// nothing installed:
//
//	go run ./connectors/iggy/iggytest/cmd/iggy-embedded -addr 127.0.0.1:8090 -data DIR
//
// Without -data everything is kept in memory; with it, messages are read
// back from the segment files through a cache of -cache bytes. -tls-cert
// and -tls-key serve TLS, -heartbeat drops clients that stop pinging,
// -cleaner enforces topics' message expiry and maximum size, and -cluster
// with -peer (and -follower) reports a leader/follower cluster to clients,
// as server 0.8.0 does with the same settings; -h lists every flag. It
// stops gracefully on SIGINT or SIGTERM: connections are closed and the
// data files flushed. A log line written after whoever reads its stderr
// went away is dropped instead of ending the process.
//
// A data directory is never silently cut back: only a torn tail of the
// newest file (a write a crash interrupted) is removed on start. Any other
// damage (a changed byte, a missing or emptied segment, a missing
// meta.log) stops the start with an error naming the file and the byte
// offset. -repair then moves the damaged files aside, under
// DIR/damaged/<time>/, never deleting them, and keeps every intact message
// with its offset.
//
// Clients are bounded: -max-connections, -max-unauthenticated,
// -login-timeout, -max-prelogin-frame (only small frames are read before a
// login), -max-frame and -max-poll-bytes (a poll reply stops at whole
// messages under it).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/strand-io/strand/connectors/iggy/iggytest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "iggy-embedded:", err)
		os.Exit(1)
	}
}

// peerList is the repeatable -peer flag.
type peerList []iggytest.ClusterNode

func (p *peerList) String() string { return fmt.Sprint(len(*p), " peers") }

func (p *peerList) Set(v string) error {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("peer %q: want name=host:port", v)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("peer %q: %w", v, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("peer %q: bad port: %w", v, err)
	}
	*p = append(*p, iggytest.ClusterNode{Name: name, IP: host, TCP: uint16(n)})
	return nil
}

func run(args []string) error {
	// A log line written after whoever reads our stderr went away must not
	// kill the broker: by default a write to a broken pipe on fd 2 ends a
	// Go program with SIGPIPE. Ignored, the write just fails.
	signal.Ignore(syscall.SIGPIPE)
	fs := flag.NewFlagSet("iggy-embedded", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "TCP address to listen on")
	data := fs.String("data", "", "data directory (empty: in memory)")
	user := fs.String("user", "iggy", "root user name")
	pass := fs.String("password", "iggy", "root user password")
	token := fs.String("token", "", "personal access token of the root user (empty: none)")
	maxMsgs := fs.Int("max-messages-per-partition", 0, "keep at most this many messages per partition (0: all)")
	sync := fs.Bool("sync", false, "fsync every write before replying")
	verbose := fs.Bool("v", false, "log connection events")
	clusterName := fs.String("cluster", "", "cluster name: report a cluster in GetClusterMetadata (empty: a single node)")
	nodeName := fs.String("node-name", "iggy-node", "this node's name in the cluster")
	nodeIP := fs.String("node-ip", "", "this node's address as clients dial it (empty: the listen host)")
	follower := fs.Bool("follower", false, "this node is a follower (the peers are then leaders)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate file: serve TLS (with -tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key file for -tls-cert")
	heartbeat := fs.Duration("heartbeat", 0, "verify client heartbeats at this interval; silent clients are dropped (0: off)")
	cacheSize := fs.Int64("cache", 0, "with -data: bytes of messages kept in memory (0: 64 MiB)")
	segSize := fs.Int64("segment-size", 0, "segment size in bytes (0: 1 GiB, as the server)")
	cleaner := fs.Duration("cleaner", 0, "run the message cleaner (expiry, max topic size) at this interval (0: off, as the server)")
	repair := fs.Bool("repair", false, "with -data: open a damaged data directory by moving damaged files aside (to DIR/damaged/<time>/, never deleted) and keeping every intact message with its offset")
	maxConns := fs.Int("max-connections", iggytest.DefaultMaxConnections, "most client connections open at once")
	maxUnauth := fs.Int("max-unauthenticated", iggytest.DefaultMaxUnauthenticated, "most connections not logged in yet")
	loginTimeout := fs.Duration("login-timeout", iggytest.DefaultLoginTimeout, "close connections not logged in within this (negative: never)")
	maxPreLogin := fs.Int("max-prelogin-frame", iggytest.DefaultMaxPreLoginFrame, "largest request payload in bytes read before a login")
	maxFrame := fs.Int("max-frame", iggytest.DefaultMaxFrame, "largest request payload in bytes (a SendMessages batch)")
	maxPoll := fs.Int("max-poll-bytes", iggytest.DefaultMaxPollBytes, "most message bytes in one poll reply (at least the largest message)")
	protocol := fs.String("protocol", "auto", "wire protocol: auto (0.10 and 0.8, detected per connection), 0.10 or 0.8")
	var peers peerList
	fs.Var(&peers, "peer", "another cluster node as name=host:tcpport (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts := []iggytest.Option{
		iggytest.WithAddr(*addr), iggytest.WithCredentials(*user, *pass),
		iggytest.WithMaxMessagesPerPartition(*maxMsgs), iggytest.WithLogger(logger),
		iggytest.WithLimits(iggytest.Limits{
			MaxConnections: *maxConns, MaxUnauthenticated: *maxUnauth, LoginTimeout: *loginTimeout,
			MaxPreLoginFrame: *maxPreLogin, MaxFrame: *maxFrame, MaxPollBytes: *maxPoll,
		}),
	}
	if *repair {
		if *data == "" {
			return fmt.Errorf("-repair needs -data")
		}
		opts = append(opts, iggytest.WithRepair())
	}
	switch *protocol {
	case "auto":
	case "0.10":
		opts = append(opts, iggytest.WithProtocol(iggytest.Protocol010))
	case "0.8":
		opts = append(opts, iggytest.WithProtocol(iggytest.Protocol08))
	default:
		return fmt.Errorf("-protocol %q: want auto, 0.10 or 0.8", *protocol)
	}
	if *data != "" {
		opts = append(opts, iggytest.WithDataDir(*data))
	}
	if *token != "" {
		opts = append(opts, iggytest.WithPersonalAccessToken(*token))
	}
	if *sync {
		opts = append(opts, iggytest.WithSyncWrites())
	}
	if *tlsCert != "" || *tlsKey != "" {
		opts = append(opts, iggytest.WithTLS(*tlsCert, *tlsKey))
	}
	if *cacheSize > 0 {
		opts = append(opts, iggytest.WithCacheSize(*cacheSize))
	}
	if *segSize > 0 {
		opts = append(opts, iggytest.WithSegmentSize(*segSize))
	}
	if *cleaner > 0 {
		opts = append(opts, iggytest.WithMessageCleaner(*cleaner))
	}
	if *heartbeat > 0 {
		opts = append(opts, iggytest.WithHeartbeat(*heartbeat))
	}
	if *clusterName != "" {
		opts = append(opts, iggytest.WithCluster(iggytest.Cluster{
			Name: *clusterName, NodeName: *nodeName, IP: *nodeIP, Follower: *follower, Others: peers,
		}))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := iggytest.NewServer(opts...)
	if err != nil {
		return err
	}
	where := "in memory"
	if *data != "" {
		where = "data in " + *data
	}
	logger.Info("iggy-embedded: serving the Iggy 0.8 TCP protocol", "addr", srv.Addr(), "storage", where)
	<-ctx.Done()
	logger.Info("iggy-embedded: shutting down")
	return srv.Close()
}
