package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/strand-io/strand/examples/accounts/bank"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/topology"
)

// Limits of GET /accounts.
const (
	defaultListLimit = 100
	maxListLimit     = 10_000
)

// queryHandler serves the read model from the local store. Reads see
// committed state only (one consistent snapshot per request), so they are
// safe while the processor commits, and they never touch the broker.
//
//	GET /accounts/{id}     one account as JSON; 404 when unknown
//	GET /accounts?limit=N  the first N accounts by id (default 100, at most 10,000)
//	GET /stats             the processor's counters per partition
func queryHandler(balances *topology.Table[bank.AccountID, bank.Account], stats func() stream.Stats) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /accounts/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("account id %q is not an unsigned integer", r.PathValue("id")))
			return
		}
		a, ok, err := balances.Get(r.Context(), bank.AccountID(id))
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, err)
		case !ok:
			writeError(w, http.StatusNotFound, fmt.Errorf("account %d not found", id))
		default:
			writeJSON(w, http.StatusOK, a)
		}
	})
	mux.HandleFunc("GET /accounts", func(w http.ResponseWriter, r *http.Request) {
		limit := defaultListLimit
		if s := r.URL.Query().Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > maxListLimit {
				writeError(w, http.StatusBadRequest, fmt.Errorf("limit %q: want 1..%d", s, maxListLimit))
				return
			}
			limit = n
		}
		out := make([]bank.Account, 0, min(limit, 1024))
		err := balances.Scan(r.Context(), func(_ bank.AccountID, a bank.Account) bool {
			out = append(out, a)
			return len(out) < limit
		})
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		if stats == nil {
			writeError(w, http.StatusNotFound, errors.New("no processor in this process"))
			return
		}
		writeJSON(w, http.StatusOK, stats())
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
