package pipeline

import (
	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/internal/testrun"

	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/deadletter"
	"github.com/strand-io/strand/stream/topology/topologytest/crashtest"
)

// The SIGKILL test runs the processor in a child process (this test binary,
// re-executed) over a deterministic 4-partition log with poison records,
// publishing dead letters to a file-backed sink, and kills it again and
// again: at random moments, and from inside hooks (before a batch, right
// after a commit, before a dead-letter send, between the send and the rows'
// deletion, after the deletion). After every kill the store must hold
// exactly the fold of the log up to its checkpoints; at the end every
// record is processed and every dead letter is in the sink exactly once.

const (
	crashEnvDir  = "STRAND_PROCESSOR_CRASH_DIR"
	crashEnvKill = "STRAND_PROCESSOR_CRASH_KILL" // "hook:n": SIGKILL at the n-th call of hook
	crashEnvLen  = "STRAND_PROCESSOR_CRASH_RECORDS"
	crashEnvHogs = "STRAND_PROCESSOR_CRASH_HOGS" // CPU-burning goroutines beside the processor
	crashParts   = 4
)

// crashLength is how long the log is in the given life: it grows while the
// kills go on, so that no life can finish everything before the last kill.
func crashLength(life int) int { return 4000 + 1000*life }

// crashFixture is the fixture every process of the test builds alike: the
// same program and the same log (of n records; a shorter log is a prefix of
// a longer one).
func crashFixture(t testing.TB, dir string, n int) *procFixture {
	fx := newProcFixture(t, crashParts, nil)
	fx.dir = filepath.Join(dir, "store")
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range n {
		acct := "acct-" + strconv.Itoa(rng.IntN(300))
		switch {
		case i%29 == 0:
			fx.pipePoison(acct)
		case i%41 == 0:
			fx.pipeReset(t, acct)
		default:
			fx.pipeDeposit(t, acct, int64(rng.IntN(1000)+1))
		}
	}
	return fx
}

// TestProcessorCrashChild is the child process; it does nothing in a
// normal run. It processes until everything is committed and published,
// then exits cleanly, unless a hook kills it first.
func TestProcessorCrashChild(t *testing.T) {
	crashtest.Child(t, "engine-crash")
	dir := os.Getenv(crashEnvDir)
	n, err := strconv.Atoi(os.Getenv(crashEnvLen))
	if err != nil {
		t.Fatal(err)
	}
	fx := crashFixture(t, dir, n)
	sink, err := openFileSink(filepath.Join(dir, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	hooks := Hooks{}
	killAfterRead := 0
	if spec := os.Getenv(crashEnvKill); spec != "" {
		name, nth, _ := strings.Cut(spec, ":")
		n, _ := strconv.Atoi(nth)
		var calls atomic.Int64
		kill := func() error {
			if calls.Add(1) == int64(n) {
				crashtest.Die(name)
			}
			return nil
		}
		switch name {
		case "AfterRead":
			killAfterRead = n
		case "BeforeProcess":
			hooks.BeforeProcess = func(uint32, []connector.Record) error { return kill() }
		case "AfterCommit":
			hooks.AfterCommit = func(uint32, executor.Result) error { return kill() }
		case "BeforeDeadLetterSend":
			hooks.BeforeDeadLetterSend = func(uint32, []deadletter.Letter) error { return kill() }
		case "AfterDeadLetterSend":
			hooks.AfterDeadLetterSend = func(uint32, []deadletter.Letter) error { return kill() }
		case "AfterDeadLetterDelete":
			hooks.AfterDeadLetterDelete = func(uint32, []deadletter.Letter) error { return kill() }
		default:
			t.Fatalf("unknown hook %q", name)
		}
	}
	db := fx.openDB(t)
	fx.bal.SetPartitions(crashParts) // GetFresh reads each key's own partition
	p := newProc(t, fx, db, WithPollSize(64), WithDeadLetterSink(sink), WithHooks(hooks))
	hogs, _ := strconv.Atoi(os.Getenv(crashEnvHogs))
	stopHogs := make(chan struct{})
	var hogWG sync.WaitGroup
	for range hogs {
		hogWG.Go(func() { burnCPU(stopHogs) })
	}
	defer func() { close(stopHogs); hogWG.Wait() }()
	// The reader: what it saw goes to the reads file before the next read
	// (a write, not an fsync: the test kills processes, not the machine),
	// and AfterRead kills right after a read was recorded.
	reads, err := os.OpenFile(filepath.Join(dir, "reads"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer reads.Close()
	stopReads := make(chan struct{})
	var readWG sync.WaitGroup
	readWG.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 3))
		for n := 1; ; n++ {
			select {
			case <-stopReads:
				return
			case <-time.After(time.Millisecond):
			}
			acct := "acct-" + strconv.Itoa(rng.IntN(300))
			v, ok, fr, err := fx.bal.GetFresh(context.Background(), acct)
			if err != nil {
				continue // not attached yet
			}
			for _, c := range fr.Checkpoints {
				if c.Source == procSource {
					fmt.Fprintf(reads, "%d %d %s %t %d\n", fr.Partition, c.Next, acct, ok, v)
				}
			}
			if n == killAfterRead {
				crashtest.Die("AfterRead")
			}
		}
	})
	defer func() { close(stopReads); readWG.Wait() }()
	r := startProcessor(p)
	testrun.WaitFor(t, 2*time.Minute, func() error { // the processor has no event to wait on
		pending, err := p.PendingDeadLetters(context.Background())
		if err == nil && len(pending) == 0 && caughtUp(p, fx.src) {
			return nil
		}
		return fmt.Errorf("the child did not finish: %d dead letters pending (%v), caught up %v", len(pending), err, caughtUp(p, fx.src))
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	close(stopReads)
	readWG.Wait()
	stopReads = make(chan struct{})
	closeDB(t, db)
	fmt.Println("crash-child: done")
}

// burnCPU spins until stop closes: the windows between a commit becoming
// visible and becoming durable open wider on a loaded machine.
func burnCPU(stop <-chan struct{}) {
	x := uint64(1)
	for i := 0; ; i++ {
		if i%(1<<16) == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		x = x*6364136223846793005 + 1442695040888963407
	}
}

// readsSeen returns, per partition, the highest checkpoint a child's reader
// saw (the reads file; a torn last line is ignored).
func readsSeen(t *testing.T, dir string) map[uint32]uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reads"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[uint32]uint64{}
	for line := range strings.Lines(string(data)) {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		var pt uint32
		var next uint64
		if _, err := fmt.Sscanf(line, "%d %d", &pt, &next); err != nil {
			t.Fatalf("reads file: line %q: %v", line, err)
		}
		out[pt] = max(out[pt], next)
	}
	return out
}

func TestProcessorSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	// 12 kills by default (24 until issue 33 item 7): the first 12 lives
	// go through every kill mode of modes once, each hook once; the soak
	// keeps 300.
	kills := crashtest.Kills(12, 300)
	dir := t.TempDir()
	fx := crashFixture(t, dir, crashLength(kills+20)) // the longest log: the reference
	length := 0
	modes := []string{"", "BeforeProcess", "", "AfterCommit", "", "BeforeDeadLetterSend", "", "AfterDeadLetterSend", "", "AfterDeadLetterDelete", "", "AfterRead"}
	hogs := 0
	if crashtest.Soak() {
		hogs = 4 // CPU burners beside the child: the windows open under load
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	killed, finished := 0, false
	for life := 0; !finished; life++ {
		if life > kills+20 {
			t.Fatalf("no clean finish after %d lives", life)
		}
		mode := ""
		if killed < kills {
			length = crashLength(life)
		}
		env := []string{crashEnvDir + "=" + dir, crashEnvLen + "=" + strconv.Itoa(length), crashEnvHogs + "=" + strconv.Itoa(hogs)}
		if killed < kills {
			mode = modes[life%len(modes)]
			if mode != "" {
				mode += ":" + strconv.Itoa(1+rng.IntN(4))
				env = append(env, crashEnvKill+"="+mode)
			}
		}
		child := crashtest.Start(t, crashtest.Spec{Role: "engine-crash", Test: "TestProcessorCrashChild", Env: env})
		var err error
		if killed < kills && mode == "" {
			select {
			case <-child.Done():
			case <-time.After(time.Duration(30+rng.IntN(220)) * time.Millisecond):
				child.Kill()
			}
			err = child.Err()
		} else {
			err = child.Wait(t, 3*time.Minute)
		}
		switch {
		case err == nil && strings.Contains(child.Output(), "crash-child: done"):
			// A child that finished before its kill came only ends the
			// test once the kills are done: the next life's log is longer.
			finished = killed >= kills || life >= kills+20
		case child.Killed():
			killed++
		default:
			t.Fatalf("child (kill mode %q) failed: %v\n%s", mode, err, child.Tail(60))
		}
		// After every life, the store is exactly the fold of the log up
		// to its checkpoints.
		db := fx.openDB(t)
		if err := fx.prog.Attach(db); err != nil {
			t.Fatal(err)
		}
		fx.checkExact(t, db)
		// Nothing a reader saw went back: every partition's checkpoint
		// (and so, by checkExact, its rows) is at least what was read.
		for pt, seen := range readsSeen(t, dir) {
			if next, _, _ := db.Checkpoint(procSource, pt); next < seen {
				t.Errorf("partition %d: a reader saw checkpoint %d, the store came back at %d (kill mode %q)", pt, seen, next, mode)
			}
		}
		if testing.Verbose() {
			var done uint64
			for pt := range fx.src.partitions() {
				next, _, _ := db.Checkpoint(procSource, pt)
				done += next
			}
			rows := 0
			for pt := range fx.src.partitions() {
				_ = db.Rows(context.Background(), 0x11, pt, func(_, _ []byte) error { rows++; return nil })
			}
			t.Logf("life %d (kill %q): %v; %d of %d records committed, %d dead letters pending", life, mode, err, done, length, rows)
		}
		closeDB(t, db)
		if t.Failed() {
			t.Fatalf("inconsistent after life %d (kill mode %q)", life, mode)
		}
	}
	t.Logf("%d kills before a clean finish", killed)
	crashtest.Coverage(t, killed >= kills, "only %d kills happened, want %d", killed, kills)

	// Everything is processed; every dead letter is in the sink once.
	fx = crashFixture(t, dir, length)
	db := fx.openDB(t)
	defer closeDB(t, db)
	if err := fx.prog.Attach(db); err != nil {
		t.Fatal(err)
	}
	for pt := range fx.src.partitions() {
		if next, _, _ := db.Checkpoint(procSource, pt); next != uint64(len(fx.src.log(pt))) {
			t.Errorf("partition %d: checkpoint %d, log has %d", pt, next, len(fx.src.log(pt)))
		}
	}
	fx.checkExact(t, db)
	sink, err := openFileSink(filepath.Join(dir, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.f.Close()
	want := 0
	for pt := range fx.src.partitions() {
		for _, r := range fx.src.log(pt) {
			if r.Headers.Tag != procTagPoison {
				continue
			}
			want++
			id := deadletter.Letter{Source: procSource, Partition: pt, Offset: r.Offset}.ID()
			if n := sink.count[id]; n != 1 {
				t.Errorf("dead letter of partition %d offset %d is in the sink %d times", pt, r.Offset, n)
			}
		}
	}
	if sink.total != want {
		t.Errorf("sink holds %d messages, want %d", sink.total, want)
	}
}

// fileSink is a Sink and SentChecker appending messages to a file, one
// write per message, so that a kill can leave any prefix of a Send. Each
// record is magic, id, payload length, payload and a CRC; opening cuts a
// torn tail.
type fileSink struct {
	mu    sync.Mutex // the outbox sends from one goroutine per partition
	f     *os.File
	count map[[16]byte]int
	total int
}

const fileSinkMagic = 0x53444c51 // "SDLQ"

func openFileSink(path string) (*fileSink, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &fileSink{f: f, count: map[[16]byte]int{}}
	pos := 0
	for {
		rest := data[pos:]
		if len(rest) < 24 || binary.BigEndian.Uint32(rest) != fileSinkMagic {
			break
		}
		n := int(binary.BigEndian.Uint32(rest[20:]))
		if len(rest) < 24+n+4 {
			break
		}
		if crc32.ChecksumIEEE(rest[4:24+n]) != binary.BigEndian.Uint32(rest[24+n:]) {
			break
		}
		var id [16]byte
		copy(id[:], rest[4:20])
		s.count[id]++
		s.total++
		pos += 24 + n + 4
	}
	if err := f.Truncate(int64(pos)); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(int64(pos), io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *fileSink) Send(ctx context.Context, msgs []connector.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		b := binary.BigEndian.AppendUint32(nil, fileSinkMagic)
		b = append(b, m.ID[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.Payload)))
		b = append(b, m.Payload...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[4:]))
		if _, err := s.f.Write(b); err != nil {
			return err
		}
		s.count[m.ID]++
		s.total++
	}
	return nil
}

func (s *fileSink) Sent(ctx context.Context, msgs []connector.Message) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(msgs))
	for i, m := range msgs {
		out[i] = s.count[m.ID] > 0
	}
	return out, nil
}
