package queryserver

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// scanRow is one row of a scan page.
type scanRow struct {
	Key       string          `json:"key"`
	Partition uint32          `json:"partition"`
	Value     json.RawMessage `json:"value"`
}

// skipped is a partition a scan did not read: served elsewhere.
type skipped struct {
	Partition uint32 `json:"partition"`
	Route     string `json:"route"`
	Owner     string `json:"owner,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// scanPage is the answer to a scan.
type scanPage struct {
	Rows []scanRow `json:"rows"`
	// Next resumes the scan after the last row read; absent at the end.
	Next string `json:"next,omitempty"`
	// Skipped lists the partitions this instance does not serve.
	Skipped []skipped `json:"skipped,omitempty"`
}

// cursor is where a scan page stopped: after key bytes Key of Partition.
type cursor struct {
	Partition uint32
	Key       []byte
}

func (c cursor) String() string {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(c.Key)), c.Partition)
	return base64.RawURLEncoding.EncodeToString(append(b, c.Key...))
}

func parseCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 5 {
		return cursor{}, errors.New("not a cursor this server gave (the next of a scan page)")
	}
	return cursor{Partition: binary.BigEndian.Uint32(b), Key: b[4:]}, nil
}

// handleScan answers GET /tables/{table}?limit=N&prefix=P&after=CURSOR.
func (s *Server) handleScan(w http.ResponseWriter, r *http.Request) {
	t, name, ok := s.table(w, r)
	if !ok {
		return
	}
	limit, prefix, from, err := s.scanParams(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("scan of table %q: %w", name, err))
		return
	}
	n := max(t.partitions(), 1)
	if from != nil && from.Partition >= n {
		writeError(w, http.StatusBadRequest, fmt.Errorf("scan of table %q: after: not a cursor of this table (it names partition %d, the table has %d): pass the next of a page of this table, or start without after", name, from.Partition, n))
		return
	}
	page := scanPage{Rows: make([]scanRow, 0, min(limit, 256))}
	read := 0
	var stop *cursor
	var frs []topology.Freshness
	var epochs []connector.Epoch
	for p := uint32(0); p < n && stop == nil; p++ {
		q := Query{Table: name, Partition: p, Partitions: n}
		rt, err := s.route(r, q)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		if rt.Kind != Local {
			page.Skipped = append(page.Skipped, skipped{Partition: p, Route: rt.Kind.String(), Owner: rt.Owner, Reason: rt.Reason})
			continue
		}
		if from != nil && p < from.Partition {
			continue
		}
		var after []byte
		if from != nil && p == from.Partition {
			after = from.Key
		}
		fr, err := t.scanPartition(r.Context(), p, after, func(kb []byte, key string, v json.RawMessage) bool {
			read++
			if strings.HasPrefix(key, prefix) {
				page.Rows = append(page.Rows, scanRow{Key: key, Partition: p, Value: v})
			}
			if len(page.Rows) == limit || read == s.cfg.scanBudget {
				stop = &cursor{Partition: p, Key: append([]byte(nil), kb...)}
				return false
			}
			return true
		})
		if err != nil {
			readErr(w, r, err)
			return
		}
		frs, epochs = append(frs, fr), append(epochs, rt.Epoch)
	}
	setFreshness(w, frs, epochs)
	if stop != nil {
		page.Next = stop.String()
	}
	writeJSON(w, http.StatusOK, page)
}

// scanParams reads limit, prefix and after; any other parameter is refused.
func (s *Server) scanParams(r *http.Request) (limit int, prefix string, from *cursor, err error) {
	limit = min(DefaultLimit, s.cfg.maxLimit)
	for k, vs := range r.URL.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > s.cfg.maxLimit {
				return 0, "", nil, fmt.Errorf("limit %q: want 1..%d", v, s.cfg.maxLimit)
			}
			limit = n
		case "prefix":
			prefix = v
		case "after":
			c, err := parseCursor(v)
			if err != nil {
				return 0, "", nil, fmt.Errorf("after %q: %w", v, err)
			}
			from = &c
		case hopParam:
		default:
			return 0, "", nil, fmt.Errorf("unknown parameter %q: want limit, prefix or after", k)
		}
	}
	return limit, prefix, from, nil
}
