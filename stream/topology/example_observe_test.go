package topology_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/connectors/iggy/iggytest"
	"github.com/strand-io/strand/stream/state"
	"github.com/strand-io/strand/stream/topology"
)

// Example_observe gives an App a meter provider, waits until it has caught
// up with its source (App.WaitCaughtUp), reads the lag from its stats and
// a metric from the provider, and reads the state directory once the App is
// closed (stream/state, what `strand inspect` prints).
func Example_observe() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := iggytest.NewServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := iggy.Connect(ctx, srv.Addr(), iggy.WithCredentials("iggy", "iggy"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	_ = client.EnsureTopic(ctx, "bank", "accounts", 4)
	pub, _ := iggy.NewPublisher(ctx, client, "bank", "accounts")
	_ = iggy.Publish(ctx, pub, Opened, AccountOpened{Account: 7, Owner: "grace"})
	_ = iggy.PublishBatch(ctx, pub, Deposits, []Deposited{{7, 5}, {7, 6}})
	_ = pub.Close(ctx)

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	topo, _ := accounts()
	dir, _ := os.MkdirTemp("", "strand-example-")
	defer os.RemoveAll(dir)
	app, err := topology.Open(ctx, topo, client, dir,
		topology.WithMeterProvider(mp), topology.WithPropagator(propagation.TraceContext{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	if err := app.WaitCaughtUp(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("lag:", app.Stats()[0].Lag())

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "strand.events.applied" {
				var n int64
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += p.Value
				}
				fmt.Println("applied:", n)
			}
		}
	}
	stop()
	<-done
	_ = app.Close()

	st, err := state.Open(ctx, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	in, err := st.Summary(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range in.Tables {
		fmt.Printf("table %s: %d rows\n", t.Name, t.Rows)
	}
	// Output:
	// lag: 0
	// applied: 3
	// table balances: 1 rows
}
