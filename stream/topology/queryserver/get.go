package queryserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// setFreshness sets HeaderCheckpoint and, when any epoch is not 0,
// HeaderEpoch, for the partitions read (epochs[i] is frs[i]'s).
func setFreshness(w http.ResponseWriter, frs []topology.Freshness, epochs []connector.Epoch) {
	var cp, ep []string
	for i, fr := range frs {
		for _, c := range fr.Checkpoints {
			cp = append(cp, strconv.FormatUint(uint64(fr.Partition), 10)+"/"+c.Source+"="+strconv.FormatUint(c.Next, 10))
		}
		if epochs[i] != 0 {
			ep = append(ep, strconv.FormatUint(uint64(fr.Partition), 10)+"="+strconv.FormatUint(uint64(epochs[i]), 10))
		}
	}
	if len(cp) > 0 {
		w.Header().Set(HeaderCheckpoint, strings.Join(cp, ", "))
	}
	if len(ep) > 0 {
		w.Header().Set(HeaderEpoch, strings.Join(ep, ", "))
	}
}

// handleGet answers GET /tables/{table}/{key}: locally, by forwarding to
// the owner, by a redirect, or 503 when the key's partition is unavailable.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	t, name, ok := s.table(w, r)
	if !ok {
		return
	}
	ks := r.PathValue("key")
	if ks == "" {
		writeError(w, http.StatusBadRequest, fmt.Errorf("table %q: empty key (GET /tables/%s/{key})", name, name))
		return
	}
	l, err := t.locate(ks)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	bound, stale, err := staleBound(r) // stale.go
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	wait, err := waitParam(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	n := t.partitions()
	q := Query{Table: name, Partitions: n, Partition: partitionOf(l.bytes, n), Key: l.bytes}
	w.Header().Set(HeaderPartition, strconv.FormatUint(uint64(q.Partition), 10))
	rt, err := s.route(r, q)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	switch rt.Kind {
	case Unavailable:
		if stale && (s.fromStandby(w, r, t, l, q, bound) || s.toStandbys(w, r, q)) {
			return
		}
		unavailable(w, q, rt)
		return
	case Remote:
		var fallback func() bool
		if stale {
			if hopped(r) && s.fromStandby(w, r, t, l, q, bound) {
				return // sent here for this instance's standby copy (stale.go)
			}
			fallback = func() bool {
				return s.fromStandby(w, r, t, l, q, bound) || s.toStandbys(w, r, q)
			}
		}
		s.toOwner(w, r, q, rt.Owner, fallback)
		return
	}
	body, found, fr, err := t.get(r.Context(), l, wait)
	if err == nil {
		setFreshness(w, []topology.Freshness{fr}, []connector.Epoch{rt.Epoch})
	}
	switch {
	case err != nil:
		readErr(w, r, err)
	case !found:
		writeError(w, http.StatusNotFound, fmt.Errorf("table %q has no key %q", name, ks))
	default:
		writeBody(w, http.StatusOK, body)
	}
}

// hopped reports whether r was forwarded or redirected here by another
// instance.
func hopped(r *http.Request) bool {
	return r.Header.Get(HeaderForwarded) != "" || r.URL.Query().Has(hopParam)
}

// ownerURL is the URL of r's path and query on the owner's server; hop
// marks it as redirected.
func ownerURL(owner string, r *http.Request, hop bool) (string, error) {
	base := owner
	if !strings.Contains(owner, "://") {
		base = "http://" + owner
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" {
		return "", fmt.Errorf("owner address %q is neither host:port nor an http(s) base URL", owner)
	}
	target := strings.TrimSuffix(u.Scheme+"://"+u.Host+u.EscapedPath(), "/") + r.URL.EscapedPath()
	query := r.URL.RawQuery
	if hop {
		q := r.URL.Query()
		q.Set(hopParam, "1")
		query = q.Encode()
	}
	if query != "" {
		target += "?" + query
	}
	return target, nil
}

// hopByHop are the headers a proxy does not pass on (RFC 9110 §7.6.1),
// with Accept-Encoding, which the forwarding transport sets itself.
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Proxy-Authorization": true, "Accept-Encoding": true}

// toOwner forwards a get to the owner of its partition, or redirects to
// it; a request that was already forwarded or redirected here is not sent
// on: the instances disagree on the owner (508). When the owner cannot
// answer (unreachable, or 502/503/504: its partition is moving), a
// non-nil fallback may answer instead (a stale read the caller allowed);
// it returns false when it wrote nothing.
func (s *Server) toOwner(w http.ResponseWriter, r *http.Request, q Query, owner string, fallback func() bool) {
	if hopped(r) {
		s.log.Warn("strand: query server refused to forward a forwarded request", "table", q.Table, "partition", q.Partition, "owner", owner)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusLoopDetected, fmt.Errorf(
			"partition %d of table %q: another instance sent this request here as to its owner, but this instance routes it to %s; the instances disagree on ownership (changing now?): retry", q.Partition, q.Table, owner))
		return
	}
	target, err := ownerURL(owner, r, s.cfg.redirect)
	if err != nil {
		writeError(w, http.StatusInternalServerError, strerr.Errorf("strand: partition %d of table %q: %w", q.Partition, q.Table, err))
		return
	}
	w.Header().Set(HeaderOwner, owner)
	if s.cfg.redirect {
		w.Header().Set("Location", target)
		writeJSON(w, http.StatusTemporaryRedirect, map[string]string{"location": target})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.forwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("forward to %s: %w", owner, err))
		return
	}
	for k, vs := range r.Header {
		if !hopByHop[k] {
			req.Header[k] = vs
		}
	}
	req.Header.Set(HeaderForwarded, "1")
	resp, err := s.cfg.client.Do(req)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		s.log.Warn("strand: query server cannot reach the owner of a partition", "table", q.Table, "partition", q.Partition, "owner", owner, "err", err)
		if fallback != nil && fallback() {
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusBadGateway, fmt.Errorf("partition %d of table %q is owned by %s, which did not answer: %w", q.Partition, q.Table, owner, err))
		return
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if fallback != nil && fallback() {
			return
		}
	}
	for k, vs := range resp.Header {
		if !hopByHop[k] && k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	w.Header().Set(HeaderOwner, owner)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// waitParam reads a get's ?wait: "1" or "true" asks for an answer that
// holds every commit that returned before the request (Table.GetFresh: in
// a group it waits until the changelog confirmed them); "", "0" or
// "false" (the default) for one that never waits (Table.GetRecent: the
// newest confirmed view, a changelog round or an fsync behind at most).
func waitParam(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("wait"); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, fmt.Errorf("bad wait=%q: want 1, true, 0 or false", v)
	}
}
