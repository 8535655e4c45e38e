package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/strand-io/strand/benchmarks/internal/workload"
	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/connector"
)

// ScaleoutQuery measures the query server's latency: two instance
// processes of a group share the partitions of the accounts workload
// o.Workload (published and processed first); o.Clients clients send
// o.Queries gets of each kind to the first instance, alternating keys of
// its own partitions (local: answered from its store) and of the other's
// (forwarded to the owner through the Router seam), one request at a time
// per client over kept-alive connections. Latency is from sending the
// request to reading the whole answer; every answer is checked against the
// reference. P50, P99, P999 and Max are the forwarded gets'; the local
// ones are in Extra ("local_p50", ...).
func ScaleoutQuery(ctx context.Context, o ScaleoutOptions, variant string) (Result, error) {
	res := Result{Scenario: "scaleout-query", Variant: variant, Codec: string(o.Codec), Extra: map[string]float64{}}
	if variant != "get" && variant != QueryWriting && variant != QueryWritingWait {
		return res, fmt.Errorf("scaleout: query: unknown variant %q (want get, %s or %s)", variant, QueryWriting, QueryWritingWait)
	}
	writing, query := variant != "get", ""
	if variant == QueryWritingWait {
		query = "?wait=1"
	}
	log, err := workload.Encode(o.base(), workload.NewDecls(o.Codec))
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp(o.Dir, "scaleout-query-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	parts := o.Workload.Partitions
	b, err := startScaleoutBroker(ctx, parts)
	if err != nil {
		return res, err
	}
	defer b.close()
	if err := b.publishAll(ctx, log); err != nil {
		return res, err
	}
	ps := make([]*instProc, 2)
	defer func() { _ = stopAll(ps) }()
	err = startGroup(ctx, o, ps, parts, ends(log), 5*time.Minute, func(i int) (InstanceConfig, func(InstanceStatus)) {
		name := fmt.Sprintf("i%d", i)
		return InstanceConfig{Broker: b.cl.Addr(), Dir: filepath.Join(dir, name), Name: name, Codec: o.Codec, Group: true,
			Session: o.Session, SnapshotEvery: -1, StatusEvery: 50 * time.Millisecond, Router: o.router()}, nil
	})
	if err != nil {
		return res, err
	}
	own, _ := owners(ps, parts)
	ref := log.Reference()
	codec := workload.NewDecls(o.Codec).Events.Opened.KeyCodec()
	var local, remote []workload.AccountID
	probe := map[uint32]workload.AccountID{} // a key of every partition
	for id := range ref {
		kb, err := codec.Append(nil, id)
		if err != nil {
			return res, err
		}
		p := connector.PartitionOf(kb, parts)
		probe[p] = id
		if own[p] == ps[0] {
			local = append(local, id)
		} else {
			remote = append(remote, id)
		}
	}
	if len(local) == 0 || len(remote) == 0 {
		return res, fmt.Errorf("scaleout: query: %d local and %d remote keys; want both", len(local), len(remote))
	}
	slices.Sort(local)
	slices.Sort(remote)
	// The first instance routes by its view of the membership, which may
	// lag the statuses a little: wait until it answers for every partition.
	hc := &http.Client{Timeout: 30 * time.Second}
	for _, id := range probe {
		var a workload.Account
		if err := getAccount(ctx, hc, ps[0].addr, id, &a, time.Minute); err != nil {
			return res, err
		}
	}
	hc.CloseIdleConnections()
	clients := max(o.Clients, 1)
	queries := max(o.Queries, 1)
	keys := [2][]workload.AccountID{local, remote}
	// A warm-up round (connections, caches), then the measured one.
	if _, err := queryRound(ctx, ps[0].addr, query, keys, ref, clients, min(queries/clients, 200)); err != nil {
		return res, err
	}
	var stopWriting func() (int, error)
	if writing {
		if stopWriting, err = writeBesideQueries(ctx, b, parts); err != nil {
			return res, err
		}
	}
	m, err := startMeasure("")
	if err != nil {
		return res, err
	}
	start := time.Now()
	lat, err := queryRound(ctx, ps[0].addr, query, keys, ref, clients, queries/clients)
	if stopWriting != nil {
		n, werr := stopWriting()
		res.Extra["written"] = float64(n)
		err = errors.Join(err, werr)
	}
	if err != nil {
		return res, err
	}
	res.Extra["requests_per_s"] = float64(len(lat[0])+len(lat[1])) / time.Since(start).Seconds()
	res.Events = len(lat[0]) + len(lat[1])
	m.stop(&res)
	res.Rate = 0
	pct := func(ds []time.Duration, q float64) float64 {
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / 1e6
	}
	res.P50, res.P99, res.P999, res.Max = pct(lat[1], 0.5), pct(lat[1], 0.99), pct(lat[1], 0.999), pct(lat[1], 1)
	res.Extra["local_p50"], res.Extra["local_p99"], res.Extra["local_p999"], res.Extra["local_max"] =
		pct(lat[0], 0.5), pct(lat[0], 0.99), pct(lat[0], 0.999), pct(lat[0], 1)
	res.Extra["clients"], res.Extra["queries"] = float64(clients), float64(queries)
	res.Extra["accounts"] = float64(len(ref))
	res.Verified = true
	res.Note = fmt.Sprintf("2 instance processes, %d client(s), gets sent to one instance alternating its own keys and the other's (router: %s); CPU s is this process's (the clients)", clients, o.router())
	if query != "" {
		res.Note += "; gets with ?wait=1 (the answer holds every commit returned before the request: it waits for the changelog)"
	}
	if writing {
		res.Note += fmt.Sprintf("; meanwhile %.0f messages without strand headers were written to every partition (each commit dead-letters them: commits that change no balance)", res.Extra["written"])
	}
	return res, stopAll(ps)
}

// QueryWriting is the query variant with commits running beside the gets:
// a writer sends messages without strand headers to every partition, a
// few every 2 ms, which the instances dead-letter (a commit each batch,
// changing no balance), so that a get often follows a commit its
// partition's changelog has not confirmed yet.
const QueryWriting = "get-writing"

// QueryWritingWait is QueryWriting with gets that wait (?wait=1): each
// answer holds every commit that returned before its request, so in a
// group it waits until the partition's changelog confirmed them; the
// default get answers the newest confirmed view without waiting.
const QueryWritingWait = "get-writing-wait"

// writeBesideQueries starts the writer of QueryWriting; the function it
// returns stops it and says how many messages it wrote.
func writeBesideQueries(ctx context.Context, b *scaleoutBroker, parts uint32) (func() (int, error), error) {
	sink, err := iggy.NewSink(ctx, b.cl, iggyStream, iggyTopic)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	n := 0
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
			msgs := make([]connector.Message, 0, parts)
			for p := range parts {
				msgs = append(msgs, connector.Message{Partition: p, HasPartition: true, Key: []byte("writer"), Payload: []byte("not an event")})
			}
			if err := sink.Send(wctx, msgs); err != nil {
				if wctx.Err() != nil {
					done <- nil
				} else {
					done <- err
				}
				return
			}
			n += len(msgs)
		}
	}()
	return func() (int, error) {
		cancel()
		err := <-done
		return n, errors.Join(err, sink.Close(context.Background()))
	}, nil
}

// queryRound runs clients clients at once against the query server at
// addr (query appended to every get's URL), each making per gets of keys[0] (local) and per of keys[1]
// (forwarded), alternating, and checking every answer against ref. It
// returns the latencies of each kind.
func queryRound(ctx context.Context, addr, query string, keys [2][]workload.AccountID, ref map[workload.AccountID]workload.Account, clients, per int) ([2][]time.Duration, error) {
	var lat [2][]time.Duration
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer hc.CloseIdleConnections()
			mine := [2][]time.Duration{}
			for i := range 2 * per {
				kind := i % 2
				id := keys[kind][(c*per+i/2)*7919%len(keys[kind])]
				d, got, err := timedGet(ctx, hc, addr, query, id)
				if err == nil && got != ref[id] {
					err = fmt.Errorf("account %d: got %+v, want %+v", id, got, ref[id])
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				mine[kind] = append(mine[kind], d)
			}
			mu.Lock()
			lat[0], lat[1] = append(lat[0], mine[0]...), append(lat[1], mine[1]...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, firstErr
}

// timedGet gets one account and returns how long the request took.
func timedGet(ctx context.Context, hc *http.Client, addr, query string, id workload.AccountID) (time.Duration, workload.Account, error) {
	var a workload.Account
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/tables/balances/%d%s", addr, id, query), nil)
	if err != nil {
		return 0, a, err
	}
	t := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, a, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	d := time.Since(t)
	if err != nil {
		return d, a, err
	}
	if resp.StatusCode != http.StatusOK {
		return d, a, fmt.Errorf("GET account %d: %d %s", id, resp.StatusCode, body)
	}
	return d, a, json.Unmarshal(body, &a)
}
