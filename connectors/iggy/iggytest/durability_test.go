package iggytest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	iggcon "github.com/apache/iggy/foreign/go/contracts"
	ierror "github.com/apache/iggy/foreign/go/errors"
)

func withSegmentBytes(n int64) Option { return optionFunc(func(c *config) { c.segmentBytes = n }) }

func durable(t *testing.T, dir string, opts ...Option) target {
	t.Helper()
	return embeddedTarget(t, append([]Option{WithDataDir(dir)}, opts...)...)
}

func pollAll(t *testing.T, cli iggcon.Client, sid, tid iggcon.Identifier, p uint32) []iggcon.IggyMessage {
	t.Helper()
	var out []iggcon.IggyMessage
	for {
		pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(uint64(len(out))), 1000, false, &p)
		must(t, err)
		if len(pm.Messages) == 0 {
			return out
		}
		out = append(out, pm.Messages...)
	}
}

func TestDurableRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	tg := durable(t, dir)
	cli := tg.login(t)
	_, err := cli.CreateStream("gone")
	must(t, err)
	_, err = cli.CreateStream("bank")
	must(t, err)
	must(t, cli.DeleteStream(mustID("gone"))) // slot 0 freed
	sid := mustID("bank")
	_, err = cli.CreateTopic(sid, "accounts", 3, iggcon.CompressionAlgorithmGzip, 0, 0, nil)
	must(t, err)
	_, err = cli.CreateTopic(sid, "dropped", 2, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	tid := mustID("accounts")
	must(t, cli.SendMessages(sid, mustID("dropped"), iggcon.None(), msgs(t, "x", 3)))
	must(t, cli.DeleteTopic(sid, mustID("dropped")))
	must(t, cli.CreatePartitions(sid, tid, 2))
	must(t, cli.DeletePartitions(sid, tid, 1)) // 4 partitions left
	for i := 0; i < 20; i++ {
		key, _ := iggcon.EntityIdString(fmt.Sprint("acct-", i%5))
		must(t, cli.SendMessages(sid, tid, key, msgs(t, fmt.Sprint("m", i), 7)))
	}
	_, err = cli.CreateConsumerGroup(sid, tid, "projector")
	must(t, err)
	must(t, cli.JoinConsumerGroup(sid, tid, mustID("projector")))
	must(t, cli.StoreConsumerOffset(iggcon.NewGroupConsumer(mustID("projector")), sid, tid, 3, u32p(0)))
	must(t, cli.StoreConsumerOffset(iggcon.NewSingleConsumer(mustID("solo")), sid, tid, 5, u32p(0)))
	must(t, cli.StoreConsumerOffset(iggcon.NewSingleConsumer(mustID("undone")), sid, tid, 2, u32p(0)))
	must(t, cli.DeleteConsumerOffset(iggcon.NewSingleConsumer(mustID("undone")), sid, tid, u32p(0)))
	before := map[uint32][]iggcon.IggyMessage{}
	for p := uint32(0); p < 4; p++ {
		before[p] = pollAll(t, cli, sid, tid, p)
	}
	must(t, tg.srv.Close())

	tg2 := durable(t, dir)
	cli2 := tg2.login(t)
	st, err := cli2.GetStream(sid)
	must(t, err)
	if st.Id != 1 || len(st.Topics) != 1 || st.Topics[0].Name != "accounts" || st.Topics[0].CompressionAlgorithm != 2 {
		t.Fatalf("restored stream = %+v", st)
	}
	td, err := cli2.GetTopic(sid, tid)
	must(t, err)
	if td.PartitionsCount != 4 || td.MessagesCount != 140 {
		t.Fatalf("restored topic = %+v", td)
	}
	for p := uint32(0); p < 4; p++ {
		after := pollAll(t, cli2, sid, tid, p)
		if len(after) != len(before[p]) {
			t.Fatalf("partition %d: %d messages after restart, %d before", p, len(after), len(before[p]))
		}
		for i := range after {
			if after[i].Header != before[p][i].Header || string(after[i].Payload) != string(before[p][i].Payload) {
				t.Fatalf("partition %d message %d changed: %+v vs %+v", p, i, after[i].Header, before[p][i].Header)
			}
		}
	}
	off, err := cli2.GetConsumerOffset(iggcon.NewGroupConsumer(mustID("projector")), sid, tid, u32p(0))
	must(t, err)
	if off == nil || off.StoredOffset != 3 {
		t.Fatalf("group offset = %+v", off)
	}
	off, err = cli2.GetConsumerOffset(iggcon.NewSingleConsumer(mustID("solo")), sid, tid, u32p(0))
	must(t, err)
	if off == nil || off.StoredOffset != 5 {
		t.Fatalf("consumer offset = %+v", off)
	}
	off, err = cli2.GetConsumerOffset(iggcon.NewSingleConsumer(mustID("undone")), sid, tid, u32p(0))
	must(t, err)
	if off != nil {
		t.Fatalf("deleted offset came back: %+v", off)
	}
	g, err := cli2.GetConsumerGroup(sid, tid, mustID("projector"))
	must(t, err)
	if g.MembersCount != 0 {
		t.Fatalf("members survive a restart: %+v", g)
	}
	// Appends continue the offsets; a new stream takes the freed slot 0.
	must(t, cli2.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "more", 1)))
	pm, err := cli2.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.LastPollingStrategy(), 1, false, u32p(0))
	must(t, err)
	if len(pm.Messages) != 1 || pm.Messages[0].Header.Offset != uint64(len(before[0])) {
		t.Fatalf("append after restart: %+v", pm)
	}
	s0, err := cli2.CreateStream("new")
	must(t, err)
	if s0.Id != 0 {
		t.Fatalf("new stream id = %d, want the freed 0", s0.Id)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "data"))
	if len(entries) != 1 {
		t.Fatalf("data dirs of deleted topics left behind: %v", entries)
	}
}

func TestDurableTornTailsAreCutOff(t *testing.T) {
	dir := t.TempDir()
	tg := durable(t, dir)
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	for i := 0; i < 3; i++ {
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, fmt.Sprint("b", i), 4)))
	}
	must(t, cli.StoreConsumerOffset(iggcon.DefaultConsumer(), sid, tid, 7, u32p(0)))
	must(t, tg.srv.Close())

	segs, _ := filepath.Glob(filepath.Join(dir, "data", "*", "0", "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	// Tear the last batch record in half, append garbage to the other logs.
	fi, err := os.Stat(segs[0])
	must(t, err)
	must(t, os.Truncate(segs[0], fi.Size()-30))
	for _, f := range []string{filepath.Join(dir, "meta.log"), filepath.Join(filepath.Dir(segs[0]), "offsets.log")} {
		fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
		must(t, err)
		_, err = fh.Write([]byte{40, 0, 0, 0, 1, 2, 3})
		must(t, err)
		must(t, fh.Close())
	}

	tg2 := durable(t, dir)
	cli2 := tg2.login(t)
	got := pollAll(t, cli2, sid, tid, 0)
	if len(got) != 8 || string(got[7].Payload) != "b1-3" {
		t.Fatalf("after torn tail: %d messages", len(got))
	}
	off, err := cli2.GetConsumerOffset(iggcon.DefaultConsumer(), sid, tid, u32p(0))
	must(t, err)
	if off == nil || off.StoredOffset != 7 || off.CurrentOffset != 7 {
		t.Fatalf("offset after torn tail = %+v", off)
	}
	must(t, cli2.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, "again", 2)))
	_, err = cli2.CreateStream("s2")
	must(t, err)
	must(t, tg2.srv.Close())

	tg3 := durable(t, dir)
	cli3 := tg3.login(t)
	got = pollAll(t, cli3, sid, tid, 0)
	if len(got) != 10 || got[9].Header.Offset != 9 || string(got[8].Payload) != "again-0" {
		t.Fatalf("after reopen: %d messages", len(got))
	}
	if _, err := cli3.GetStream(mustID("s2")); err != nil {
		t.Fatalf("stream created after a torn metadata tail: %v", err)
	}
}

func TestDurableRetentionDropsOldSegments(t *testing.T) {
	dir := t.TempDir()
	tg := durable(t, dir, WithMaxMessagesPerPartition(10), withSegmentBytes(1))
	cli := tg.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 1, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	for i := 0; i < 10; i++ {
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(0), msgs(t, fmt.Sprint("b", i), 3)))
	}
	check := func(cli iggcon.Client) {
		pm, err := cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.FirstPollingStrategy(), 100, false, u32p(0))
		must(t, err)
		if got := offsets(pm); len(got) != 10 || got[0] != 20 || got[9] != 29 {
			t.Fatalf("retained offsets %v", got)
		}
		pm, err = cli.PollMessages(sid, tid, iggcon.DefaultConsumer(), iggcon.OffsetPollingStrategy(3), 2, false, u32p(0))
		must(t, err)
		if got := offsets(pm); !slices.Equal(got, []uint64{20, 21}) {
			t.Fatalf("poll below retention: %v", got)
		}
	}
	check(cli)
	must(t, tg.srv.Close())
	segs, _ := filepath.Glob(filepath.Join(dir, "data", "*", "0", "*.seg"))
	if len(segs) > 5 {
		t.Fatalf("%d segment files kept for 10 messages of 3-message batches", len(segs))
	}
	check(durable(t, dir, WithMaxMessagesPerPartition(10), withSegmentBytes(1)).login(t))
}

// TestDurableSurvivesKill9 runs a durable broker in a child process (this
// test binary re-executed), sends through the SDK, kills the child with
// SIGKILL and checks that every acknowledged message and offset is there
// when the directory is opened again.
func TestDurableSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	proc, addr := startBroker(t, dir, "")
	child := target{addr: addr, user: "iggy", pass: "iggy"}
	cli := child.login(t)
	_, err := cli.CreateStream("s")
	must(t, err)
	sid, tid := mustID("s"), mustID("t")
	_, err = cli.CreateTopic(sid, "t", 2, iggcon.CompressionAlgorithmNone, 0, 0, nil)
	must(t, err)
	for i := 0; i < 50; i++ {
		must(t, cli.SendMessages(sid, tid, iggcon.PartitionId(uint32(i%2)), msgs(t, fmt.Sprint("b", i), 10)))
	}
	_, err = cli.PollMessages(sid, tid, iggcon.NewSingleConsumer(mustID("c")), iggcon.NextPollingStrategy(), 33, true, u32p(1))
	must(t, err)
	proc.Kill()
	_ = cli.Close()

	tg := durable(t, dir)
	cli2 := tg.login(t)
	for p := uint32(0); p < 2; p++ {
		got := pollAll(t, cli2, sid, tid, p)
		if len(got) != 250 {
			t.Fatalf("partition %d: %d messages after kill -9, want 250", p, len(got))
		}
	}
	off, err := cli2.GetConsumerOffset(iggcon.NewSingleConsumer(mustID("c")), sid, tid, u32p(1))
	must(t, err)
	if off == nil || off.StoredOffset != 32 {
		t.Fatalf("auto-committed offset after kill -9 = %+v", off)
	}
	_, err = cli2.GetStream(mustID("nope"))
	wantErr(t, err, ierror.ErrStreamIdNotFound)
}
