package scenario_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/scenario"
	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/internal/testrun"
)

// childEnv makes this test binary, re-executed, act as the broker process
// or an instance process of the scale-out measurements.
const childEnv = "STRAND_SCENARIO_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" && len(os.Args) > 1 {
		iggy.RouteStdLog(slog.New(slog.DiscardHandler))
		var err error
		switch os.Args[1] {
		case "-" + scenario.ServeBrokerFlag:
			err = scenario.ServeBroker(context.Background(), os.Stdin, os.Stdout)
		case "-" + scenario.InstanceFlag:
			err = scenario.ServeInstance(context.Background(), os.Args[2], os.Stdin, os.Stdout)
		default:
			err = fmt.Errorf("unknown child mode %q", os.Args[1])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The broker process inherits the environment.
	if err := os.Setenv(childEnv, "1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	iggy.RouteStdLog(slog.New(slog.DiscardHandler))
	testrun.QuietChildren() // the broker and instance children exit at once under -race
	testrun.Verify(m)
}

func smallOptions(t *testing.T) scenario.ScaleoutOptions {
	w := workload.Default()
	// The smallest sizes that still go through every path (issue 33 item
	// 7: 3000 events, 2000 keys and 200 queries before): several events
	// per account and per partition, a history of updates, snapshots.
	w.Events, w.Accounts, w.Partitions = 1000, 100, 4
	return scenario.ScaleoutOptions{Codec: workload.Binary, Dir: t.TempDir(), Workload: w,
		Keys: 500, History: 3, SnapshotEvery: 1, Session: time.Second, Rate: 500, Queries: 100, Clients: 2, Instances: 2}
}

func TestScaleoutRestoreSmoke(t *testing.T) {
	ctx := context.Background()
	o := smallOptions(t)
	for _, v := range []string{scenario.RestoreNaive, scenario.RestoreChangelog, scenario.RestoreSnapshot} {
		r, err := scenario.ScaleoutRestore(ctx, o, v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		t.Logf("%s: %.3f s %+v", v, r.Seconds, r.Extra)
		if !r.Verified || r.Seconds <= 0 || r.Events != o.Keys*o.History {
			t.Errorf("%s: %+v", v, r)
		}
		if v == scenario.RestoreSnapshot && r.Extra["from_snapshot"] != 1 {
			t.Errorf("snap: the new owner did not restore from a snapshot: %+v", r.Extra)
		}
		if v == scenario.RestoreChangelog && (r.Extra["from_snapshot"] != 0 || r.Extra["applied"] < 1) {
			t.Errorf("clog: %+v", r.Extra)
		}
	}
}

func TestScaleoutPauseSmoke(t *testing.T) {
	ctx := context.Background()
	o := smallOptions(t)
	o.Instances = 3
	o.Session, o.Steady, o.Tail = 500*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	for _, v := range []string{scenario.PauseLeave, scenario.PauseKill} {
		r, err := scenario.ScaleoutPause(ctx, o, v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		t.Logf("%s: %.3f s %+v", v, r.Seconds, r.Extra)
		if !r.Verified || r.Seconds <= 0 || r.Extra["moved"] < 1 {
			t.Errorf("%s: %+v", v, r)
		}
		if v == scenario.PauseKill && r.Seconds < o.Session.Seconds()*0.8 {
			t.Errorf("kill: the partitions moved after %.3f s, before the session timeout %v could expire", r.Seconds, o.Session)
		}
	}
}

func TestScaleoutThroughputSmoke(t *testing.T) {
	ctx := context.Background()
	o := smallOptions(t)
	for _, v := range []string{scenario.ThroughputSolo, "1", "2"} {
		r, err := scenario.ScaleoutThroughput(ctx, o, v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		t.Logf("%s: %.0f events/s, %.3f CPU s %+v", v, r.Rate, r.CPUSeconds, r.Extra)
		if !r.Verified || r.Rate <= 0 || r.CPUSeconds < 0 || r.Extra["cpu_per_M_total"] < r.Extra["cpu_per_M_instances"] { // CPU of a run this small may count as 0 (clock ticks)
			t.Errorf("%s: %+v", v, r)
		}
	}
}

func TestScaleoutQuerySmoke(t *testing.T) {
	o := smallOptions(t)
	r, err := scenario.ScaleoutQuery(context.Background(), o, "get")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if !r.Verified || r.Events != 2*o.Queries || r.P50 <= 0 || r.P99 < r.P50 || r.Extra["local_p50"] <= 0 {
		t.Errorf("%+v", r)
	}
}
