package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream/topology"
)

// The scale-out measurements (issue 14, "Performance"; docs/design.md,
// "Scale-out"): restore time against state size (scaleout_restore.go), the
// rebalance pause after a SIGKILL (scaleout_pause.go), the throughput of
// several instances (scaleout_throughput.go) and the query server's
// latency for local and forwarded gets (scaleout_query.go). Every one
// runs the broker in a process of its own (the embedded broker, in
// memory); the instances of a group are processes of their own too
// (ServeInstance), except in the restore measurement, where the old and the
// new owner run one after the other in the measuring process.

// ScaleoutOptions configure the scale-out measurements.
type ScaleoutOptions struct {
	Codec workload.Codec
	// Dir is where stores go (a fresh subdirectory is made).
	Dir string
	// Exe and Env start an instance process: Exe run with
	// -<InstanceFlag> <config> and the environment Env (nil: this
	// process's).
	Exe string
	Env []string
	// Logs, when set, is a directory that receives each instance's log.
	Logs string

	// Restore: the partition's keys and history (events per key: 1 is one
	// AccountOpened per key, h adds h-1 deposits or withdrawals per key on
	// average, on keys drawn uniformly), and the snapshot interval of the
	// snap variant (commits).
	Keys, History int
	SnapshotEvery int

	// Workload is the log of the throughput measurement, and the
	// partitions, accounts and skew of the pause and query measurements.
	Workload workload.Config
	// Base is how many events the pause and query measurements publish
	// and process before they measure (0: Workload.Events).
	Base int
	// Instances is the instance count of the pause measurement (at
	// least 2; the throughput measurement's is its variant).
	Instances int
	// Session is the group's session timeout (0: 10s, the default; the
	// pause measurement's is in its scenario name).
	Session time.Duration
	// Rate is the producer's pace during the pause measurement
	// (events/s).
	Rate float64
	// Steady and Tail are how long the pause measurement lets the group
	// work before the kill and after the move (0: 2s and 3s).
	Steady, Tail time.Duration
	// Queries is how many gets of each kind the query measurement makes.
	Queries int
	// Clients is how many clients make them at once (the query
	// measurement's scenario name carries it).
	Clients int
	// Router is the instances' query router: "own" (GroupRouter, the
	// default) or "default" (the query server's own).
	Router string
}

// ScaleoutPrefix starts the scenario name of every scale-out measurement.
const ScaleoutPrefix = "scaleout-"

// IsScaleout reports whether scenario names a scale-out measurement.
func IsScaleout(scenario string) bool { return strings.HasPrefix(scenario, ScaleoutPrefix) }

// changelogTopic is the changelog of the accounts topology of codec c.
func changelogTopic(c workload.Codec) string {
	return topology.ChangelogTopic(groupStream, bank.TopologyName(bank.Codec(c)))
}

// scaleoutBroker is the embedded broker in a process of its own, with the
// accounts topic, a client and a publisher on the topic.
type scaleoutBroker struct {
	proc *brokerProcess
	cl   *iggy.Client
	pub  *iggy.Publisher
}

func startScaleoutBroker(ctx context.Context, partitions uint32) (*scaleoutBroker, error) {
	b, pub, err := startBrokerPublisher(ctx, "", "process", partitions)
	if err != nil {
		return nil, err
	}
	return &scaleoutBroker{proc: b.proc, cl: b.cl, pub: pub}, nil
}

// publishAll publishes the whole log and closes the publisher.
func (b *scaleoutBroker) publishAll(ctx context.Context, log *workload.Log) error {
	err := publish(ctx, b.pub, log, 0, log.Len())
	return errors.Join(err, b.pub.Close(ctx))
}

// cpu returns the broker process's CPU time so far.
func (b *scaleoutBroker) cpu() time.Duration { return procCPU(b.proc.cmd.Process.Pid) }

// close closes the publisher (if publishAll did not) and the client and
// kills the broker process: it holds nothing to keep, and a graceful stop
// of the embedded broker takes a second.
func (b *scaleoutBroker) close() {
	_ = b.pub.Close(context.Background())
	_ = b.cl.Close()
	_ = b.proc.cmd.Process.Kill()
	b.proc.close()
}

// procCPU returns the user + system CPU time of process pid from
// /proc/<pid>/stat (in clock ticks of 10 ms), or 0.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// instProc is an instance process (ServeInstance), seen from the
// measuring process.
type instProc struct {
	name  string
	dir   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string // its query server

	mu       sync.Mutex
	last     InstanceStatus
	seen     bool
	onStatus func(InstanceStatus) // called for every status line, in order
	exited   chan struct{}
	err      error // how it ended
	ending   bool  // stop or kill was called: its end is expected
}

// startInstance starts an instance process and waits until it is ready
// (its App open, Run started).
func startInstance(ctx context.Context, o ScaleoutOptions, cfg InstanceConfig, onStatus func(InstanceStatus)) (*instProc, error) {
	if o.Logs != "" && cfg.LogFile == "" {
		cfg.LogFile = filepath.Join(o.Logs, cfg.Name+".log")
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	exe := o.Exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, exe, "-"+InstanceFlag, string(b))
	cmd.Env = o.Env
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start instance %s: %w", cfg.Name, err)
	}
	p := &instProc{name: cfg.Name, dir: cfg.Dir, cmd: cmd, stdin: stdin, onStatus: onStatus, exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, readyPrefix):
				ready <- strings.TrimPrefix(line, readyPrefix)
			case strings.HasPrefix(line, statusPrefix):
				var st InstanceStatus
				if err := json.Unmarshal([]byte(line[len(statusPrefix):]), &st); err != nil {
					continue
				}
				p.mu.Lock()
				p.last, p.seen = st, true
				fn := p.onStatus
				p.mu.Unlock()
				if fn != nil {
					fn(st)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.exited)
	}()
	select {
	case a := <-ready:
		p.addr = a
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("instance %s exited before it was ready: %v", cfg.Name, p.err)
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("instance %s not ready after 60 s", cfg.Name)
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

// startGroup fills ps with instance processes, started one after the
// other: each once the ones before it settled (waitSettled with ends,
// within timeout). Instances that join at once make an instance give up
// partitions while its processors are still starting, which can leave it
// hung (Run does not return and its partitions stay Serving; see HISTORY.md,
// "Scale-out"): the measurements start their groups the way an operator
// adds instances.
func startGroup(ctx context.Context, o ScaleoutOptions, ps []*instProc, parts uint32, ends []uint64, timeout time.Duration,
	mk func(i int) (InstanceConfig, func(InstanceStatus))) error {
	for i := range ps {
		cfg, fn := mk(i)
		p, err := startInstance(ctx, o, cfg, fn)
		if err != nil {
			return err
		}
		ps[i] = p
		if err := waitSettled(ctx, ps[:i+1], parts, ends, timeout); err != nil {
			return err
		}
	}
	return nil
}

// status returns the latest status line, and whether there was one.
func (p *instProc) status() (InstanceStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.seen
}

// alive reports whether the process is still running.
func (p *instProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// failed returns an error if the process ended without being asked to.
func (p *instProc) failed() error {
	select {
	case <-p.exited:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.ending {
			return nil
		}
		return fmt.Errorf("instance %s ended: %v", p.name, p.err)
	default:
		return nil
	}
}

// stop asks the instance to stop (it leaves its group and closes its App)
// and waits for it; after 30 s it is killed.
func (p *instProc) stop() error {
	p.mu.Lock()
	p.ending = true // from now on its end is expected
	p.mu.Unlock()
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("instance %s did not stop within 30 s", p.name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("instance %s: %w", p.name, p.err)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to end.
func (p *instProc) kill() {
	p.mu.Lock()
	p.ending = true
	p.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	_ = p.stdin.Close()
}

// cpu returns the CPU time the process used in all: from its rusage once
// it ended, else from /proc.
func (p *instProc) cpu() time.Duration {
	select {
	case <-p.exited:
		if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		return 0
	default:
		return procCPU(p.cmd.Process.Pid)
	}
}

// dumpStacks makes every running instance print its goroutines to stderr
// (SIGQUIT: the Go runtime prints them and exits), for a group that did
// not settle.
func dumpStacks(ps []*instProc) {
	for _, p := range ps {
		if p == nil || !p.alive() {
			continue
		}
		p.mu.Lock()
		p.ending = true
		p.mu.Unlock()
		fmt.Fprintf(os.Stderr, "scaleout: goroutines of instance %s (pid %d) follow\n", p.name, p.cmd.Process.Pid)
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
		}
	}
}

// stopAll stops every instance still running and returns the first error.
func stopAll(ps []*instProc) error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range ps {
		if p == nil || !p.alive() {
			continue
		}
		wg.Go(func() {
			if err := p.stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// owners returns, from the instances' latest statuses, the instance that
// serves each partition (nil: none) and whether every partition is
// served by exactly one.
func owners(ps []*instProc, parts uint32) ([]*instProc, bool) {
	own := make([]*instProc, parts)
	ok := true
	for _, p := range ps {
		if p == nil || !p.alive() {
			continue
		}
		st, seen := p.status()
		if !seen || len(st.Parts) != int(parts) {
			ok = false
			continue
		}
		for i, s := range st.Parts {
			if s.Phase == topology.Serving {
				if own[i] != nil {
					ok = false
				}
				own[i] = p
			}
		}
	}
	for _, o := range own {
		if o == nil {
			ok = false
		}
	}
	return own, ok
}

// waitSettled waits until every partition is served by exactly one of the
// running instances, each serves ⌊n/m⌋ or ⌈n/m⌉ of them, and every
// partition's checkpoint has reached ends (nil: any).
func waitSettled(ctx context.Context, ps []*instProc, parts uint32, ends []uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		for _, p := range ps {
			if err := p.failed(); err != nil {
				return err
			}
		}
		own, ok := owners(ps, parts)
		if ok {
			live := 0
			count := map[*instProc]int{}
			for _, p := range ps {
				if p.alive() {
					live++
				}
			}
			for _, o := range own {
				count[o]++
			}
			lo := int(parts) / max(live, 1)
			for _, p := range ps {
				if p.alive() && (count[p] < lo || count[p] > lo+1) {
					ok = false
				}
			}
			if ok && ends != nil {
				for i, o := range own {
					st, _ := o.status()
					if st.Parts[i].Next < ends[i] {
						ok = false
					}
				}
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, p := range ps {
				st, _ := p.status()
				fmt.Fprintf(&b, " %s(alive %v):", p.name, p.alive())
				for i, s := range st.Parts {
					fmt.Fprintf(&b, " %d=%v@%d", i, s.Phase, s.Next)
				}
			}
			dumpStacks(ps)
			return fmt.Errorf("the instances did not settle within %v:%s", timeout, b.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// publishPaced publishes events [from, to) of log at rate events/s,
// sending every 5 ms what came due; once hurry is closed, it publishes the
// rest at once.
func publishPaced(ctx context.Context, pub *iggy.Publisher, log *workload.Log, from, to int, rate float64, hurry <-chan struct{}) error {
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := from; i < to; {
		due := from + int(time.Since(start).Seconds()*rate)
		select {
		case <-hurry:
			due = to
		default:
		}
		if due > i {
			if err := publish(ctx, pub, log, i, min(due, to)); err != nil {
				return err
			}
			i = min(due, to)
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-hurry:
		case <-tick.C:
		}
	}
	return pub.Flush(ctx)
}

// endsUpTo returns, per partition of log, how many of its first n events
// (in publish order) the partition holds: its end offset once they are
// published.
func endsUpTo(log *workload.Log, n int) []uint64 {
	out := make([]uint64, log.Partitions())
	for p := range out {
		out[p] = uint64(sort.Search(log.PartitionLen(uint32(p)), func(off int) bool { return log.Index(uint32(p), off) >= n }))
	}
	return out
}

// verifyThroughQuery reads every account of log's reference through the
// query server at addr (which serves its own partitions and forwards the
// others) and compares it with the reference.
func verifyThroughQuery(ctx context.Context, addr string, log *workload.Log) error {
	ref := log.Reference()
	ids := make(chan workload.AccountID)
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				var got workload.Account
				err := getAccount(ctx, hc, addr, id, &got, 20*time.Second)
				if err == nil && got != ref[id] {
					err = fmt.Errorf("account %d through %s: got %+v, want %+v", id, addr, got, ref[id])
				}
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for id := range ref {
		select {
		case ids <- id:
		case err = <-errc:
			break feed
		}
	}
	close(ids)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errc:
	default:
	}
	return err
}

// getAccount gets one account through a query server, retrying answers
// that say to retry (503, 502, 508) for up to patience.
func getAccount(ctx context.Context, hc *http.Client, addr string, id workload.AccountID, into *workload.Account, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	url := fmt.Sprintf("http://%s/tables/balances/%d", addr, id)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		switch resp.StatusCode {
		case http.StatusOK:
			return json.Unmarshal(body, into)
		case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusLoopDetected:
			if time.Now().After(deadline) {
				return fmt.Errorf("GET %s: %d %s after %v", url, resp.StatusCode, body, patience)
			}
			time.Sleep(50 * time.Millisecond)
		default:
			return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
		}
	}
}

// historyLog is the restore measurement's log, in one partition: one
// AccountOpened for each of keys accounts, then (history-1)·keys deposits
// and withdrawals on accounts drawn uniformly (updates of the same keys).
func historyLog(keys, history int, codec workload.Codec) (*workload.Log, error) {
	if keys < 1 || history < 1 {
		return nil, fmt.Errorf("scaleout: restore: %d keys, history %d: want both positive", keys, history)
	}
	cfg := workload.Config{Events: keys * history, Accounts: keys, Partitions: 1}
	rng := rand.New(rand.NewPCG(uint64(keys), uint64(history)))
	return workload.EncodeEvents(cfg, workload.NewDecls(codec), func(i int) workload.Event {
		if i < keys {
			return workload.Event{Kind: workload.KindOpened, Account: workload.AccountID(i + 1)}
		}
		a := workload.AccountID(1 + rng.IntN(keys))
		if rng.IntN(2) == 0 {
			return workload.Event{Kind: workload.KindDeposited, Account: a, Amount: 1 + rng.Int64N(1000)}
		}
		return workload.Event{Kind: workload.KindWithdrawn, Account: a, Amount: 1 + rng.Int64N(100)}
	})
}

// ends returns the end offset of every partition of log.
func ends(log *workload.Log) []uint64 {
	out := make([]uint64, log.Partitions())
	for p := range out {
		out[p] = uint64(log.PartitionLen(uint32(p)))
	}
	return out
}

// base returns the workload of the pause and query measurements.
func (o ScaleoutOptions) base() workload.Config {
	w := o.Workload
	if o.Base > 0 {
		w.Events = o.Base
	}
	return w
}
