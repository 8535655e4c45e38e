package queryserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// Optionally-stale reads (Kafka's KIP-535; docs/design.md §15,
// "Standbys"): a get whose owner cannot answer (the partition is moving:
// restoring, or its owner unreachable) may be answered from this
// instance's standby copy of the partition, when the caller allows a
// staleness bound.
const (
	// HeaderMaxStaleness on a get request (or the query parameter
	// max_staleness) allows a stale answer from a standby copy when the
	// partition's owner cannot answer: a Go duration ("2s", "500ms") or
	// seconds ("1.5"), the oldest the copy may have been current. Without
	// it nothing stale is ever answered.
	HeaderMaxStaleness = "Strand-Max-Staleness"
	// HeaderStaleness is set on an answer read from a standby copy: how
	// old it may be, in milliseconds (the copy held every commit of the
	// changelog that long ago). Its absence means the owner answered.
	HeaderStaleness = "Strand-Staleness"
	// HeaderStandbyLag is set on an answer read from a standby copy: the
	// changelog records it was known not to have applied yet.
	HeaderStandbyLag = "Strand-Standby-Lag"
	// HeaderStandbySeq is set on an answer read from a standby copy: the
	// number of the last commit of the partition it held when the read
	// began (HeaderEpoch is that commit's owner's epoch).
	HeaderStandbySeq = "Strand-Standby-Seq"

	staleParam = "max_staleness"
)

// staleBound returns the staleness the request allows, and false when it
// allows none.
func staleBound(r *http.Request) (time.Duration, bool, error) {
	v := r.Header.Get(HeaderMaxStaleness)
	if q := r.URL.Query().Get(staleParam); q != "" {
		v = q
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || secs > 1e6 {
			return 0, false, fmt.Errorf("%s %q is neither a duration (\"2s\") nor seconds", HeaderMaxStaleness, v)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, false, fmt.Errorf("%s %q is negative", HeaderMaxStaleness, v)
	}
	return d, true, nil
}

// fromStandby answers the get from this instance's standby copy of the
// key's partition, if the bound allows; false (nothing written) when no
// copy is current within it.
func (s *Server) fromStandby(w http.ResponseWriter, r *http.Request, t table, l located, q Query, bound time.Duration) bool {
	var body []byte
	var found bool
	var fr topology.Freshness
	st, err := s.app.ReadStandby(r.Context(), q.Partition, bound, func(ctx context.Context) error {
		var err error
		// A view taken for the read (wait): the newest one an earlier
		// read took may be older than the copy (App.ReadStandby).
		body, found, fr, err = t.get(ctx, l, true)
		return err
	})
	if errors.Is(err, topology.ErrNoStandby) {
		return false
	}
	if err != nil {
		readErr(w, r, err)
		return true
	}
	setFreshness(w, []topology.Freshness{fr}, []connector.Epoch{st.Epoch})
	w.Header().Set(HeaderStaleness, strconv.FormatInt(st.Age.Milliseconds(), 10))
	w.Header().Set(HeaderStandbyLag, strconv.FormatUint(st.Lag, 10))
	w.Header().Set(HeaderStandbySeq, strconv.FormatUint(st.Seq, 10))
	if !found {
		writeError(w, http.StatusNotFound, fmt.Errorf("table %q has no key %q (in a standby copy %dms stale)", q.Table, r.PathValue("key"), st.Age.Milliseconds()))
		return true
	}
	writeBody(w, http.StatusOK, body)
	return true
}

// toStandbys asks the other instances that keep a standby copy of the
// key's partition (topology.App.StandbyAddrs) for a stale answer, in
// promotion order, and passes on the first answer that is one (200 or 404,
// from a standby copy or from a new owner); false (nothing written) when
// none answers so, or when the request was sent here by another instance
// already.
func (s *Server) toStandbys(w http.ResponseWriter, r *http.Request, q Query) bool {
	if hopped(r) || s.cfg.redirect {
		return false
	}
	for _, addr := range s.app.StandbyAddrs(q.Partition) {
		target, err := ownerURL(addr, r, false)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.forwardTimeout)
		req, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
		if err != nil {
			cancel()
			continue
		}
		for k, vs := range r.Header {
			if !hopByHop[k] {
				req.Header[k] = vs
			}
		}
		req.Header.Set(HeaderForwarded, "1")
		resp, err := s.cfg.client.Do(req)
		if err != nil {
			cancel()
			continue
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
			resp.Body.Close()
			cancel()
			continue
		}
		for k, vs := range resp.Header {
			if !hopByHop[k] && k != "Content-Length" {
				w.Header()[k] = vs
			}
		}
		if resp.Header.Get(HeaderStaleness) == "" {
			w.Header().Set(HeaderOwner, addr) // it owns the partition now
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		cancel()
		return true
	}
	return false
}
