package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strand-io/strand/examples/accounts/bank"
)

// queryStats is what a check through a query server saw.
type queryStats struct {
	Via       string
	Gets      int64 // answered gets
	Forwarded int64 // of them answered by another instance (Strand-Owner)
	Retried   int64 // 503, 502 and 508 answers retried
}

// retryPause is how long a check waits before asking again after a
// retryable answer (the server's Retry-After is in whole seconds; a check
// asks sooner).
const retryPause = 100 * time.Millisecond

// fetchAccounts gets every account of ids through the query server at via
// (workers at once), retrying the answers that say "not now" (503 while a
// partition is restored or changes hands, 502 while its owner is gone, 508
// while the instances disagree on its owner) until ctx ends. An account
// answered 404 is absent from the result.
func fetchAccounts(ctx context.Context, hc *http.Client, via string, ids []bank.AccountID, workers int) (map[bank.AccountID]bank.Account, queryStats, error) {
	qs := queryStats{Via: via}
	var gets, fwd, retried atomic.Int64
	out := make(map[bank.AccountID]bank.Account, len(ids))
	var mu sync.Mutex
	var firstErr error
	work := make(chan bank.AccountID)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for id := range work {
				acc, found, owner, retries, err := getAccount(ctx, hc, via, id)
				retried.Add(int64(retries))
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if found {
					out[id] = acc
				}
				mu.Unlock()
				if err == nil {
					gets.Add(1)
					if owner != "" {
						fwd.Add(1)
					}
				}
			}
		})
	}
	for _, id := range ids {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		work <- id
	}
	close(work)
	wg.Wait()
	qs.Gets, qs.Forwarded, qs.Retried = gets.Load(), fwd.Load(), retried.Load()
	return out, qs, firstErr
}

// getAccount gets one account, retrying "not now" answers.
func getAccount(ctx context.Context, hc *http.Client, via string, id bank.AccountID) (acc bank.Account, found bool, owner string, retries int, err error) {
	// ?wait=1: every commit that returned (the default answer may be a
	// changelog round behind in a group).
	url := fmt.Sprintf("http://%s/tables/balances/%d?wait=1", via, id)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return acc, false, "", retries, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return acc, false, "", retries, fmt.Errorf("GET %s: %w", url, err)
			}
			return acc, false, "", retries, fmt.Errorf("GET %s: the query server does not answer: %w", url, err)
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case rerr != nil:
			return acc, false, "", retries, fmt.Errorf("GET %s: %w", url, rerr)
		case resp.StatusCode == http.StatusOK:
			if err := json.Unmarshal(body, &acc); err != nil {
				return acc, false, "", retries, fmt.Errorf("GET %s: %w: %s", url, err, body)
			}
			return acc, true, resp.Header.Get("Strand-Owner"), retries, nil
		case resp.StatusCode == http.StatusNotFound:
			return acc, false, resp.Header.Get("Strand-Owner"), retries, nil
		case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusBadGateway, resp.StatusCode == http.StatusLoopDetected:
			retries++
			select {
			case <-ctx.Done():
				return acc, false, "", retries, fmt.Errorf("GET %s: still %d when the check's time ran out (%s): %w", url, resp.StatusCode, body, ctx.Err())
			case <-time.After(retryPause):
			}
		default:
			return acc, false, "", retries, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
		}
	}
}

// checkGroup checks a group's run: it reads the events topic back up to
// ends and folds it sequentially, gets every account (and every other id
// of the workload's range, which must be 404) through the one query server
// at via, compares, checks the dead-letter topic (each poison record
// exactly once, no message id twice) and the changelog (valid commits
// contiguous across owners, epochs rising).
func (a *app) checkGroup(ctx context.Context, via string, ends []uint64, rep *report) error {
	ref, err := a.reference(ctx, ends)
	if err != nil {
		return err
	}
	ids := ref.IDs()
	inRef := make(map[bank.AccountID]bool, len(ids))
	for _, id := range ids {
		inRef[id] = true
	}
	for id := bank.AccountID(1); id <= bank.AccountID(a.cfg.accounts); id++ {
		if !inRef[id] {
			ids = append(ids, id) // never in the log: must be 404
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	got, qs, err := fetchAccounts(qctx, a.httpClient(), via, ids, 8)
	if err != nil {
		return fmt.Errorf("check through %s: %w", via, err)
	}
	rep.Check = ref.CompareAccounts(got)
	rep.Query = &qs
	rep.RefDuplicates, rep.RefHeld = ref.Duplicates(), ref.Held()

	// Dead letters are published after their commits: wait for missing
	// ones a little, never for repeated ones.
	deadline := time.Now().Add(30 * time.Second)
	for {
		dls, err := a.deadLetters(ctx)
		if err != nil {
			return fmt.Errorf("check: read the dead-letter topic back: %w", err)
		}
		rep.DeadLetters = len(dls.origins)
		rep.DLQErr = errors.Join(bank.CheckDeadLetters(ref.Poison(), dls.origins), dls.repeatedIDs())
		if rep.DLQErr == nil || len(dls.origins) >= len(ref.Poison()) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A commit's changelog record may reach the broker a moment after the
	// commit: wait a little for the valid history to reach the log's end.
	deadline = time.Now().Add(30 * time.Second)
	for {
		clogs, err := a.readChangelog(ctx)
		if err != nil {
			return fmt.Errorf("check: read the changelog: %w", err)
		}
		rep.Changelog = summarize(clogs, ends)
		if rep.Changelog.reached(clogs, ends) || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runGroupCheck is -role check -query: the group behind the query server
// at -query catches up with the log as it is now, then checkGroup.
func (a *app) runGroupCheck(ctx context.Context) (report, error) {
	var rep report
	if err := a.connect(ctx); err != nil {
		return rep, err
	}
	ends, err := a.endOffsets(ctx)
	if err != nil {
		return rep, err
	}
	addrs := func() []string {
		out := []string{a.cfg.query}
		if gs, err := fetchStatus(ctx, a.httpClient(), a.cfg.query); err == nil {
			for _, m := range gs.Members {
				if m.Addr != "" && m.Addr != a.cfg.query {
					out = append(out, m.Addr)
				}
			}
		}
		return out
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := waitGroupCaughtUp(wctx, a.httpClient(), addrs, ends); err != nil {
		return rep, err
	}
	if err := a.checkGroup(ctx, a.cfg.query, ends, &rep); err != nil {
		return rep, err
	}
	a.printCheck(rep)
	return rep, a.verdict(rep)
}

// deadLetterSet is what the dead-letter topic holds for this program's
// source: each letter's origin and message id.
type deadLetterSet struct {
	origins []bank.Origin
	ids     [][16]byte
}

// repeatedIDs returns an error naming the message ids found more than
// once, or nil.
func (d deadLetterSet) repeatedIDs() error {
	seen := make(map[[16]byte]int, len(d.ids))
	var rep []string
	for _, id := range d.ids {
		seen[id]++
		if seen[id] == 2 {
			rep = append(rep, fmt.Sprintf("%x", id))
		}
	}
	if len(rep) == 0 {
		return nil
	}
	return fmt.Errorf("%w: message ids more than once: %v", bank.ErrDeadLetters, rep)
}

// httpClient returns the run's client of query servers (the instances'
// /group, the check's gets), made on first use and released by closeAll.
func (a *app) httpClient() *http.Client {
	a.hcOnce.Do(func() { a.hc = newHTTPClient(15 * time.Second) })
	return a.hc
}

// splitHostPort splits "host:port" with a numeric port.
func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q of %q", ps, addr)
	}
	return host, port, nil
}

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
