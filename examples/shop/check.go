package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/examples/shop/orders"
	"github.com/strand-io/strand/stream/topology"
)

// repartitionTopic is the topic of the shop's KeyBy step (topology.KeyBy's
// default name).
const repartitionTopic = "shop-by-customer-repartition"

// check compares the store and the topics with a sequential fold of the
// workload and returns an error naming the first differences.
func check(ctx context.Context, cfg config, cl *iggy.Client, log *slog.Logger, stdout io.Writer) error {
	lines := orders.Workload(cfg.events, cfg.orders, cfg.customer, cfg.seed)
	wantOrders, wantCustomers, wantReceipts := orders.Reference(lines)
	shop := shopTopology(cfg)
	app, err := topology.Open(ctx, shop.Topology, cl, cfg.data, topology.WithLogger(log),
		topology.WithDeadLetterTopic(orders.Stream+"/"+orders.DLQTopic))
	if err != nil {
		return err
	}
	defer app.Close()

	var problems []string
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	got := map[orders.OrderID]orders.Order{}
	if err := shop.Orders.Scan(ctx, func(k orders.OrderID, v orders.Order) bool { got[k] = v; return true }); err != nil {
		return err
	}
	for k, w := range wantOrders {
		if got[k] != w {
			bad("order %d = %+v, want %+v", k, got[k], w)
		}
	}
	if len(got) != len(wantOrders) {
		bad("%d orders, want %d", len(got), len(wantOrders))
	}
	customers := 0
	if err := shop.Customers.Scan(ctx, func(k orders.CustomerID, v orders.Customer) bool {
		customers++
		w := wantCustomers[k]
		if v != w {
			bad("customer %s = %+v, want %+v", k, v, w)
		}
		return true
	}); err != nil {
		return err
	}
	if customers != len(wantCustomers) {
		bad("%d customers, want %d", customers, len(wantCustomers))
	}

	// The enriched orders (a foreign-key join with the profiles), and the
	// enriched lines' topic: every line once.
	if shop.EnrichedOrders != nil {
		want := orders.EnrichedReference(lines, orders.CustomerProfiles(cfg.customer, cfg.seed))
		n := 0
		if err := shop.EnrichedOrders.Scan(ctx, func(k orders.OrderID, v orders.EnrichedOrder) bool {
			n++
			if w := want[k]; v != w {
				bad("enriched order %d = %+v, want %+v", k, v, w)
			}
			return true
		}); err != nil {
			return err
		}
		if n != len(want) {
			bad("%d enriched orders, want %d", n, len(want))
		}
		enriched, err := readTopic(ctx, cl, orders.EnrichedTopic)
		if err != nil {
			return err
		}
		once := map[int]int{}
		for _, m := range enriched {
			e, err := orders.Enriched.Decode(m.Payload)
			if err != nil {
				return fmt.Errorf("an enriched line at %d/%d: %w", m.Partition, m.Offset, err)
			}
			once[e.N]++
		}
		for _, l := range lines {
			if once[l.N] != 1 {
				bad("enriched line %d published %d times", l.N, once[l.N])
				break
			}
		}
		if len(enriched) != len(lines) {
			bad("%d enriched lines in the topic, want %d", len(enriched), len(lines))
		}
	}

	// The receipts topic: every receipt exactly once (none without the
	// receipts step).
	var receipts []iggy.StoredMessage
	if cfg.noReceipts {
		wantReceipts = nil
	} else if receipts, err = readTopic(ctx, cl, orders.ReceiptsTopic); err != nil {
		return err
	}
	seen := map[int]int{}
	for _, m := range receipts {
		r, err := orders.Receipts.Decode(m.Payload)
		if err != nil {
			return fmt.Errorf("a receipt at %d/%d: %w", m.Partition, m.Offset, err)
		}
		seen[r.N]++
	}
	for _, r := range wantReceipts {
		if seen[r.N] != 1 {
			bad("receipt of line %d published %d times", r.N, seen[r.N])
		}
	}
	if len(receipts) != len(wantReceipts) {
		bad("%d receipts in the topic, want %d", len(receipts), len(wantReceipts))
	}

	// The repartition topic: every line forwarded exactly once.
	fwd, err := readTopic(ctx, cl, repartitionTopic)
	if err != nil {
		return err
	}
	ids := map[[16]byte]int{}
	type stream8 struct {
		part   uint32
		origin [8]byte
	}
	lastSeq := map[stream8]uint64{}
	for _, m := range fwd {
		ids[m.ID]++
		// The design relies on one origin's messages reaching a
		// partition in the order of their sequence numbers (the id's last
		// 8 bytes).
		k := stream8{m.Partition, [8]byte(m.ID[:8])}
		seq := binary.BigEndian.Uint64(m.ID[8:])
		if last, ok := lastSeq[k]; ok && seq <= last {
			bad("repartition topic partition %d offset %d: origin %x seq %d after seq %d", m.Partition, m.Offset, m.ID[:8], seq, last)
		}
		lastSeq[k] = max(lastSeq[k], seq)
	}
	dups := 0
	for _, n := range ids {
		dups += n - 1
	}
	if len(ids) != len(lines) || dups > 0 {
		bad("repartition topic: %d messages, %d distinct, %d duplicates; want %d lines once each", len(fwd), len(ids), dups, len(lines))
	}
	dls, err := app.PendingDeadLetters(ctx)
	if err != nil {
		return err
	}
	if len(dls) > 0 {
		bad("%d dead letters pending", len(dls))
	}
	if len(problems) > 0 {
		return fmt.Errorf("check failed:\n  %s", joinLines(problems))
	}
	fmt.Fprintf(stdout, "check: ok: %d orders, %d customers, %d receipts and %d forwarded lines, each exactly once; orders enriched with their customers' profiles\n",
		len(wantOrders), len(wantCustomers), len(receipts), len(fwd))
	return nil
}

// readTopic reads every message of shop/topic.
func readTopic(ctx context.Context, cl *iggy.Client, topic string) ([]iggy.StoredMessage, error) {
	n, err := cl.Partitions(ctx, orders.Stream, topic)
	if err != nil {
		return nil, fmt.Errorf("topic %s/%s: %w", orders.Stream, topic, err)
	}
	ends, err := cl.EndOffsets(ctx, orders.Stream, topic)
	if err != nil {
		return nil, err
	}
	var out []iggy.StoredMessage
	for pt := range n {
		if ends[pt] == 0 {
			continue
		}
		ms, err := cl.Tail(ctx, orders.Stream, topic, pt, int(ends[pt]))
		if err != nil {
			return nil, err
		}
		if uint64(len(ms)) != ends[pt] {
			return nil, fmt.Errorf("topic %s partition %d: read %d messages, its end offset is %d", topic, pt, len(ms), ends[pt])
		}
		out = append(out, ms...)
	}
	return out, nil
}

func joinLines(s []string) string { return strings.Join(s, "\n  ") }
