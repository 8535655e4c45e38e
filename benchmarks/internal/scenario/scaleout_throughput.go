package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/sysstat"
	"github.com/strand-io/strand/benchmarks/internal/workload"
)

// ThroughputSolo is the throughput measurement's variant of one instance
// outside any group (no changelog); the others are instance counts
// ("1", "2", "3").
const ThroughputSolo = "solo"

// ScaleoutThroughput measures the throughput of instance processes over
// the accounts workload o.Workload: variant "1", "2", "3"... instances of
// a group, or "solo", one App outside any group. The instances start on
// the empty topic and settle (every partition Serving on one of them,
// balanced); then the log is published as fast as one publisher can and
// the clock runs from the first publish to every partition's checkpoint
// at its end. CPU is the user + system time of every process over that
// window: the instances (Result.CPUSeconds), the broker process and this
// process (the producer). At the end every account is read through the
// first instance's query server and compared with the reference.
func ScaleoutThroughput(ctx context.Context, o ScaleoutOptions, variant string) (Result, error) {
	res := Result{Scenario: "scaleout-throughput", Variant: variant, Codec: string(o.Codec), Extra: map[string]float64{}}
	n, group := 1, variant != ThroughputSolo
	if group {
		var err error
		if n, err = strconv.Atoi(variant); err != nil || n < 1 {
			return res, fmt.Errorf("scaleout: throughput: variant %q: want %q or an instance count", variant, ThroughputSolo)
		}
	}
	log, err := workload.Encode(o.Workload, workload.NewDecls(o.Codec))
	if err != nil {
		return res, err
	}
	res.Events, res.InputBytes = log.Len(), int64(log.Bytes())
	res.Extra["instances"] = float64(n)
	dir, err := os.MkdirTemp(o.Dir, "scaleout-throughput-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	b, err := startScaleoutBroker(ctx, o.Workload.Partitions)
	if err != nil {
		return res, err
	}
	defer b.close()

	ps := make([]*instProc, n)
	defer func() { _ = stopAll(ps) }()
	t := time.Now()
	err = startGroup(ctx, o, ps, o.Workload.Partitions, nil, 2*time.Minute, func(i int) (InstanceConfig, func(InstanceStatus)) {
		name := fmt.Sprintf("i%d", i)
		return InstanceConfig{Broker: b.cl.Addr(), Dir: filepath.Join(dir, name), Name: name, Codec: o.Codec, Group: group,
			Session: o.Session, SnapshotEvery: -1, StatusEvery: 10 * time.Millisecond, Router: o.router()}, nil
	})
	if err != nil {
		return res, err
	}
	res.Extra["settle_s"] = time.Since(t).Seconds()

	cpu0 := make([]time.Duration, n)
	for i, p := range ps {
		cpu0[i] = p.cpu()
	}
	bcpu0, ocpu0 := b.cpu(), sysstat.CPUTime()
	start := time.Now()
	perr := make(chan error, 1)
	var published time.Duration
	go func() {
		err := publish(ctx, b.pub, log, 0, log.Len())
		published = time.Since(start)
		perr <- err
	}()
	if err := waitSettled(ctx, ps, o.Workload.Partitions, ends(log), 30*time.Minute); err != nil {
		return res, err
	}
	res.Seconds = time.Since(start).Seconds()
	var icpu time.Duration
	for i, p := range ps {
		icpu += p.cpu() - cpu0[i]
	}
	bcpu, ocpu := b.cpu()-bcpu0, sysstat.CPUTime()-ocpu0
	if err := <-perr; err != nil {
		return res, fmt.Errorf("producer: %w", err)
	}
	res.Rate = float64(res.Events) / res.Seconds
	res.CPUSeconds = icpu.Seconds()
	millions := float64(res.Events) / 1e6
	res.Extra["producer_rate"] = float64(res.Events) / published.Seconds()
	res.Extra["cpu_broker_s"], res.Extra["cpu_producer_s"] = bcpu.Seconds(), ocpu.Seconds()
	res.Extra["cpu_per_M_instances"] = icpu.Seconds() / millions
	res.Extra["cpu_per_M_total"] = (icpu + bcpu + ocpu).Seconds() / millions
	res.Extra["partitions"] = float64(o.Workload.Partitions)
	if err := verifyThroughQuery(ctx, ps[0].addr, log); err != nil {
		return res, err
	}
	res.Verified = true
	what := fmt.Sprintf("%d instance processes of a group", n)
	if !group {
		what = "one instance process outside any group (no changelog)"
	}
	res.Note = fmt.Sprintf("%s, settled on the empty topic; clock from the first publish to the last checkpoint; broker in a process of its own", what)
	return res, stopAll(ps)
}
