package topology_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/connector/memconn"
	"github.com/strand-io/strand/stream/topology"
	"github.com/strand-io/strand/stream/topology/topologytest"
)

// retainedStore runs version 1 of the accounts topology over 200 events
// on a driver's in-memory broker, closes it and removes the oldest
// records of partition 1 of its source (retention), leaving the broker
// and the state directory.
func retainedStore(t *testing.T) (*memconn.Broker, string, uint64) {
	t.Helper()
	dir := t.TempDir()
	topo1, _, _ := evolving(1)
	d := topologytest.NewDriver(t, topo1, topologytest.WithDir(dir), topologytest.WithPartitions(3), topologytest.WithBatchSize(7))
	newEvolveModel().pipe(d, rand.New(rand.NewPCG(26, 2)), 200)
	d.Advance()
	d.Close()
	b := d.Broker()
	src := b.Topic("bank/accounts")
	n, _ := src.Len(1)
	if n < 4 {
		t.Fatalf("partition 1 holds %d records, want a few", n)
	}
	trim := uint64(n / 2)
	src.Trim(1, trim)
	return b, dir, trim
}

// TestBuildRetentionRefusedAtOpen: a change that needs a table rebuilt
// from a log whose oldest records the retention removed is refused at
// Open, before anything starts, naming the table, the partition and the
// offsets; the store is left to the old topology.
func TestBuildRetentionRefusedAtOpen(t *testing.T) {
	ctx := context.Background()
	b, dir, trim := retainedStore(t)
	topo2, _, _ := evolving(2)
	app, err := topology.Open(ctx, topo2, b, dir)
	if err == nil {
		app.Close()
		t.Fatal("Open of a topology that rebuilds balances from a trimmed log succeeded, want ErrBuildRetention")
	}
	if !errors.Is(err, topology.ErrBuildRetention) {
		t.Fatalf("Open = %v, want ErrBuildRetention", err)
	}
	for _, want := range []string{`table "balances"`, `source "bank/accounts"`, fmt.Sprintf("partition 1 starts at offset %d", trim),
		fmt.Sprintf("offsets 0 to %d", trim-1), "strand reset"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	db, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	builds, err := db.Builds()
	db.Close()
	if err != nil || len(builds) != 0 {
		t.Fatalf("builds after the refusal: %v, %v; want none begun", builds, err)
	}
	topo1, _, _ := evolving(1)
	app, err = topology.Open(ctx, topo1, b, dir)
	if err != nil {
		t.Fatalf("the old topology cannot open the store after the refusal: %v", err)
	}
	app.Close()
}

// TestBuildRetentionAtFirstRead: with a connector that cannot say where
// its partitions start (no connector.StartOffsetter), Open starts the
// build and the build's first read of the trimmed partition stops the App
// with ErrBuildRetention, before it commits anything of that partition.
func TestBuildRetentionAtFirstRead(t *testing.T) {
	b, dir, trim := retainedStore(t)
	topo2, _, _ := evolving(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, err := topology.Open(ctx, topo2, noStarts{b}, dir)
	if err != nil {
		t.Fatalf("Open with a connector that cannot tell where partitions start = %v, want it to open", err)
	}
	defer app.Close()
	err = app.Run(ctx)
	if !errors.Is(err, topology.ErrBuildRetention) {
		t.Fatalf("Run = %v, want ErrBuildRetention", err)
	}
	if want := fmt.Sprintf("records 0 to %d of the partition are gone", trim-1); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not say %q: %v", want, err)
	}
}

// noStarts is a connector whose sources cannot say where their partitions
// start: they are sources, EndOffsetters and Identifiers only.
type noStarts struct{ b *memconn.Broker }

func (c noStarts) OpenSource(ctx context.Context, topic string) (connector.Source, error) {
	src, err := c.b.OpenSource(ctx, topic)
	if err != nil {
		return nil, err
	}
	return plainSource{src.(*memconn.Topic)}, nil
}

func (c noStarts) OpenSink(ctx context.Context, topic string, partitions uint32) (connector.Sink, error) {
	return c.b.OpenSink(ctx, topic, partitions)
}

type plainSource struct{ t *memconn.Topic }

func (s plainSource) Name() string                                     { return s.t.Name() }
func (s plainSource) Partitions(ctx context.Context) (uint32, error)   { return s.t.Partitions(ctx) }
func (s plainSource) EndOffsets(ctx context.Context) ([]uint64, error) { return s.t.EndOffsets(ctx) }
func (s plainSource) Identity(ctx context.Context) (string, error)     { return s.t.Identity(ctx) }
func (s plainSource) Open(ctx context.Context, p uint32, from uint64) (connector.PartitionReader, error) {
	return s.t.Open(ctx, p, from)
}
