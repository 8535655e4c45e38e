package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one processor of a group run as a child process (-role all
// -instances N, and the scale-out tests): -role processor -group
// -instance N. Its output goes, line by line and prefixed with "[N] ", to
// echo (when set) and to a tail kept for diagnostics; the first line that
// announces its query server gives Addr.
type instance struct {
	N   int
	cmd *exec.Cmd

	addrKnown chan struct{} // closed once Addr is set
	exited    chan struct{} // closed once it exited; then err is set
	err       error

	mu   sync.Mutex
	addr string
	tail []string
}

// tailLines is how many lines of its output an instance keeps.
const tailLines = 400

// Addr returns the address of the instance's query server ("" until it
// announced it).
func (in *instance) Addr() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.addr
}

// Tail returns the last n lines the instance wrote.
func (in *instance) Tail(n int) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return strings.Join(in.tail[max(0, len(in.tail)-n):], "\n")
}

// Exited reports whether the instance's process has exited.
func (in *instance) Exited() bool {
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

// Signal sends sig to the instance's process, unless it exited.
func (in *instance) Signal(sig syscall.Signal) error {
	if in.Exited() {
		return nil
	}
	return in.cmd.Process.Signal(sig)
}

// Kill SIGKILLs the instance and waits until it is gone.
func (in *instance) Kill() {
	_ = in.Signal(syscall.SIGKILL)
	<-in.exited
}

// Stop asks the instance to stop (SIGTERM, then SIGKILL after grace) and
// waits until it is gone. A stopped (SIGSTOP) instance is continued first.
func (in *instance) Stop(grace time.Duration) {
	_ = in.Signal(syscall.SIGCONT)
	_ = in.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
	case <-time.After(grace):
		in.Kill()
	}
}

// Quit makes the instance print the stacks of its goroutines and exit
// (SIGQUIT), for a failure's diagnosis, and waits until it is gone.
func (in *instance) Quit(grace time.Duration) {
	_ = in.Signal(syscall.SIGCONT)
	_ = in.Signal(syscall.SIGQUIT)
	select {
	case <-in.exited:
	case <-time.After(grace):
		in.Kill()
	}
}

// launcher starts the processes of instances: by default this program's
// executable again; the tests re-execute their test binary.
type launcher func(args []string) *exec.Cmd

func selfLauncher() (launcher, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program's executable to start instances: %w", err)
	}
	return func(args []string) *exec.Cmd { return exec.Command(exe, args...) }, nil
}

// startInstance starts instance n with args and the Iggy password in its
// environment (not on its command line); echo, when not nil, gets its
// output lines prefixed with "[n] ".
func startInstance(launch launcher, n int, args []string, password string, echo io.Writer) (*instance, error) {
	in := &instance{N: n, addrKnown: make(chan struct{}), exited: make(chan struct{})}
	in.cmd = launch(args)
	if password != "" {
		if in.cmd.Env == nil {
			in.cmd.Env = os.Environ()
		}
		in.cmd.Env = append(in.cmd.Env, passwordEnv+"="+password)
	}
	stdout, err := in.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := in.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := in.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start instance %d: %w", n, err)
	}
	var echoMu sync.Mutex
	var addrOnce sync.Once
	var readers sync.WaitGroup
	read := func(r io.Reader) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			in.mu.Lock()
			in.tail = append(in.tail, line)
			if len(in.tail) > 2*tailLines {
				in.tail = slices.Clone(in.tail[len(in.tail)-tailLines:])
			}
			in.mu.Unlock()
			if echo != nil {
				echoMu.Lock()
				fmt.Fprintf(echo, "[%d] %s\n", n, line)
				echoMu.Unlock()
			}
			if strings.HasPrefix(line, queryLine+" ") {
				if _, url, ok := strings.Cut(line, "http://"); ok {
					addrOnce.Do(func() {
						in.mu.Lock()
						in.addr = strings.TrimSpace(url)
						in.mu.Unlock()
						close(in.addrKnown)
					})
				}
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}
	readers.Add(2)
	go read(stdout)
	go read(stderr)
	go func() {
		readers.Wait()
		in.err = in.cmd.Wait()
		close(in.exited)
	}()
	return in, nil
}

// readyLine is what a processor logs once it runs.
const readyLine = "processor running"

// waitAddr waits until the instance announced its query server, exited,
// or timeout passed.
func (in *instance) waitAddr(timeout time.Duration) error {
	select {
	case <-in.addrKnown:
		return nil
	case <-in.exited:
		return fmt.Errorf("instance %d exited before it served queries (%v):\n%s", in.N, in.err, in.Tail(30))
	case <-time.After(timeout):
		return fmt.Errorf("instance %d did not serve queries within %v:\n%s", in.N, timeout, in.Tail(30))
	}
}

// instanceArgs are the flags of instance n of this run's group.
func (a *app) instanceArgs(n int, http string) []string {
	c := a.cfg
	args := []string{"-role", "processor", "-group", "-instance", strconv.Itoa(n),
		"-iggy", a.addr, "-user", c.user,
		"-stream", c.stream, "-topic", c.topic, "-dlq", c.dlq,
		"-partitions", strconv.Itoa(int(c.partitions)), "-dlq-partitions", strconv.Itoa(int(c.dlqPartitions)),
		"-codec", string(c.codec), "-data", a.dir, "-http", http,
		"-session-timeout", c.sessionTimeout.String(), "-snapshot-every", strconv.Itoa(c.snapshotEvery),
		"-progress", "0"}
	if c.httpPublic {
		args = append(args, "-http-public")
	}
	if !c.static {
		args = append(args, "-static=false")
	}
	if c.standbys > 0 {
		args = append(args, "-standbys", strconv.Itoa(c.standbys))
	}
	if c.resequence {
		args = append(args, "-resequence")
	}
	if c.nosync {
		args = append(args, "-nosync")
	}
	if c.verbose {
		args = append(args, "-v")
	}
	return args
}

// instanceHTTP is the -http address of instance n: the port after the
// -http one for each instance (8081, 8082, ... by default), or a free
// port each when -http asks for port 0.
func (a *app) instanceHTTP(n int) string {
	if a.cfg.http == "" {
		return "127.0.0.1:0"
	}
	host, port, err := splitHostPort(a.cfg.http)
	if err != nil || port == 0 || port+n > 65535 {
		return joinHostPort(host, 0)
	}
	return joinHostPort(host, port+n)
}

// newHTTPClient returns a client of the instances' query servers with a
// transport of its own (CloseIdleConnections releases it).
func newHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// fetchStatus reads the /group of the instance whose query server is at
// addr.
func fetchStatus(ctx context.Context, hc *http.Client, addr string) (groupStatus, error) {
	var gs groupStatus
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // a stopped instance does not answer
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/group", nil)
	if err != nil {
		return gs, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return gs, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return gs, fmt.Errorf("GET http://%s/group: %s", addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&gs); err != nil {
		return gs, fmt.Errorf("GET http://%s/group: %w", addr, err)
	}
	return gs, nil
}

// fetchStatuses reads the /group of every address that answers.
func fetchStatuses(ctx context.Context, hc *http.Client, addrs []string) []groupStatus {
	out := make([]groupStatus, len(addrs))
	ok := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			gs, err := fetchStatus(ctx, hc, addr)
			out[i], ok[i] = gs, err == nil
		})
	}
	wg.Wait()
	var live []groupStatus
	for i := range out {
		if ok[i] {
			live = append(live, out[i])
		}
	}
	return live
}

// groupCaughtUp reports whether the instances, together, serve every
// partition up to ends (ends[p] is partition p's end offset) with nothing
// left to publish, each partition at exactly one instance; if not, why.
func groupCaughtUp(statuses []groupStatus, ends []uint64) (bool, string) {
	servedBy := make([][]int, len(ends))
	var behind []string
	for _, gs := range statuses {
		for _, p := range gs.Partitions {
			if int(p.Partition) >= len(ends) || p.Phase != "serving" {
				continue
			}
			servedBy[p.Partition] = append(servedBy[p.Partition], gs.Instance)
			switch {
			case p.Next < ends[p.Partition]:
				behind = append(behind, fmt.Sprintf("partition %d at %d of %d", p.Partition, p.Next, ends[p.Partition]))
			case p.Pending > 0:
				behind = append(behind, fmt.Sprintf("partition %d has %d messages to publish", p.Partition, p.Pending))
			}
		}
	}
	for p, by := range servedBy {
		switch {
		case len(by) == 0 && ends[p] > 0:
			behind = append(behind, fmt.Sprintf("partition %d is served by no instance", p))
		case len(by) > 1:
			behind = append(behind, fmt.Sprintf("partition %d is served by instances %v", p, by))
		}
	}
	if len(behind) > 0 {
		if len(behind) > 4 {
			behind = append(behind[:4], fmt.Sprintf("and %d more", len(behind)-4))
		}
		return false, strings.Join(behind, "; ")
	}
	return true, ""
}

// waitGroupCaughtUp waits until the instances whose query servers addrs
// returns serve every partition up to ends (groupCaughtUp), or ctx ends,
// or no instance has answered for noneFor.
func waitGroupCaughtUp(ctx context.Context, hc *http.Client, addrs func() []string, ends []uint64) error {
	const noneFor = 10 * time.Second
	why := "no instance answered"
	lastAnswer := time.Now()
	for {
		sts := fetchStatuses(ctx, hc, addrs())
		if len(sts) > 0 {
			lastAnswer = time.Now()
		} else if time.Since(lastAnswer) > noneFor {
			return fmt.Errorf("the group did not catch up: no instance answered for %v", noneFor)
		}
		if ok, w := groupCaughtUp(sts, ends); ok {
			return nil
		} else if w != "" {
			why = w
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group did not catch up: %s: %w", why, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// caughtUpTimeout bounds how long a -instances run waits, once the
// producer is done, for the group to commit everything.
const caughtUpTimeout = 3 * time.Minute

// runInstances is -role all with -instances N: the broker (unless -iggy)
// and the producer in this process, N processors of one group as child
// processes, then the check of every account through one instance's query
// server.
func (a *app) runInstances(ctx context.Context) (rep report, err error) {
	if a.launch == nil {
		if a.launch, err = selfLauncher(); err != nil {
			return rep, err
		}
	}
	if a.cfg.iggy == "" {
		if err := a.startBroker("127.0.0.1:0"); err != nil {
			return rep, err
		}
	}
	if err := a.connect(ctx); err != nil {
		return rep, err
	}
	ends0, err := a.endOffsets(ctx)
	if err != nil {
		return rep, err
	}
	base := int64(sum(ends0))
	prod, err := a.newProducer(ctx)
	if err != nil {
		return rep, err
	}
	defer prod.close(ctx)

	var mu sync.Mutex
	var insts []*instance
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		var wg sync.WaitGroup
		for _, in := range insts {
			if err != nil && a.dumpOnFailure {
				wg.Go(func() { in.Quit(10 * time.Second) })
				continue
			}
			wg.Go(func() { in.Stop(15 * time.Second) })
		}
		wg.Wait()
	}()
	live := func() []*instance {
		mu.Lock()
		defer mu.Unlock()
		var out []*instance
		for _, in := range insts {
			if !in.Exited() {
				out = append(out, in)
			}
		}
		return out
	}
	addrs := func() []string {
		var out []string
		for _, in := range live() {
			if ad := in.Addr(); ad != "" {
				out = append(out, ad)
			}
		}
		return out
	}
	a.printf("starting %d processor instances of one group (session timeout %v, a snapshot every %d commits), each with its store under %s/state-N and its query server",
		a.cfg.instances, a.cfg.sessionTimeout, a.cfg.snapshotEvery, a.dir)
	for n := 1; n <= a.cfg.instances; n++ {
		in, err := startInstance(a.launch, n, a.instanceArgs(n, a.instanceHTTP(n)), a.cfg.password, a.echo)
		if err != nil {
			return rep, err
		}
		mu.Lock()
		insts = append(insts, in)
		mu.Unlock()
	}
	for _, in := range live() {
		if err := in.waitAddr(time.Minute); err != nil {
			return rep, err
		}
	}

	if a.cfg.events > 0 {
		a.printf("publishing %s events of %s accounts (Zipf skew %g, seed %d, %s codec) and %d poison records to %s on %s, %d partitions",
			commas(int64(a.cfg.events)), commas(int64(a.cfg.accounts)), a.cfg.skew, a.cfg.seed, a.cfg.codec, a.cfg.poison, a.cfg.source(), a.addr, a.cfg.partitions)
	} else {
		a.printf("publishing events until interrupted to %s on %s", a.cfg.source(), a.addr)
	}
	start := time.Now()
	pctx, cancelProgress := context.WithCancel(ctx)
	defer cancelProgress()
	go a.reportInstances(pctx, addrs, func() int64 { return base + prod.sent() })
	if a.cfg.killAfter > 0 {
		victim := live()[len(live())-1]
		killed := make(chan struct{})
		t := time.AfterFunc(a.cfg.killAfter, func() {
			defer close(killed)
			a.printf("killing instance %d (pid %d) with SIGKILL; the group gives its partitions to the others within the session timeout (%v)",
				victim.N, victim.cmd.Process.Pid, a.cfg.sessionTimeout)
			at := time.Now()
			victim.Kill()
			if _, ok := a.waitAllServed(pctx, addrs); ok {
				a.printf("rebalance: every partition is served again %v after the SIGKILL", time.Since(at).Round(time.Millisecond))
			}
		})
		defer func() {
			if !t.Stop() {
				cancelProgress() // ends waitAllServed
				<-killed
			}
		}()
	}
	if err := prod.run(ctx); err != nil {
		return rep, err
	}
	rep.Published, rep.Poison, rep.PublishTime = prod.published.Load(), prod.poisoned.Load(), time.Since(start)
	if ctx.Err() != nil {
		a.printf("interrupted: published %s events and %s poison records (no check: the run was not finished)", commas(rep.Published), commas(rep.Poison))
		return rep, nil
	}
	ends, err := a.endOffsets(ctx)
	if err != nil {
		return rep, err
	}
	if len(live()) == 0 {
		return rep, errors.New("every instance is gone")
	}
	// Catching up takes about as long as the backlog at the end of
	// publishing; a group that cannot (a partition served by nobody or by
	// two instances for minutes) is a failure, with the reason.
	wctx, cancelWait := context.WithTimeout(ctx, caughtUpTimeout)
	err = waitGroupCaughtUp(wctx, a.httpClient(), addrs, ends)
	cancelWait()
	if err != nil {
		return rep, err
	}
	rep.ProcessTime = time.Since(start)
	rep.Records = sum(ends) - sum(ends0)
	cancelProgress()
	via := live()[0]
	if err := a.checkGroup(ctx, via.Addr(), ends, &rep); err != nil {
		return rep, err
	}
	a.summary(rep)
	if err := a.verdict(rep); err != nil {
		return rep, err
	}
	if a.cfg.serve {
		a.printf("serving through %v until interrupted", addrs())
		<-ctx.Done()
	}
	return rep, nil
}

// waitAllServed waits until the instances serve every partition again
// and returns how long that took, or false when ctx ended first.
func (a *app) waitAllServed(ctx context.Context, addrs func() []string) (time.Duration, bool) {
	start := time.Now()
	for {
		served := map[uint32]bool{}
		for _, gs := range fetchStatuses(ctx, a.httpClient(), addrs()) {
			for _, p := range gs.Partitions {
				if p.Phase == "serving" {
					served[p.Partition] = true
				}
			}
		}
		if len(served) == int(a.cfg.partitions) {
			return time.Since(start), true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reportInstances prints, every -progress interval, the producer's count,
// what the group has committed (a partition nobody serves now counts with
// what its last owner had committed), the lag behind the log's end, and
// each instance's partitions with the progress of their restores, until
// ctx ends.
func (a *app) reportInstances(ctx context.Context, addrs func() []string, published func() int64) {
	if a.cfg.progress <= 0 {
		return
	}
	t := time.NewTicker(a.cfg.progress)
	defer t.Stop()
	committed := make([]uint64, a.cfg.partitions)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sts := fetchStatuses(ctx, a.httpClient(), addrs())
		slices.SortFunc(sts, func(x, y groupStatus) int { return x.Instance - y.Instance })
		parts := make([]string, 0, len(sts))
		for _, gs := range sts {
			for _, p := range gs.Partitions {
				if p.Phase == "serving" && int(p.Partition) < len(committed) {
					committed[p.Partition] = p.Next
				}
			}
			parts = append(parts, fmt.Sprintf("[%d] %s", gs.Instance, gs.describe()))
		}
		next := sum(committed)
		lag := "?"
		if ends, err := a.endOffsets(ctx); err == nil && sum(ends) >= next {
			lag = commas(int64(sum(ends) - next))
		}
		a.printf("progress: published %s, committed %s, lag %s; partitions %s",
			commas(published()), commas(int64(next)), lag, strings.Join(parts, " | "))
	}
}
