package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/strand-io/strand/connectors/iggy"
	"github.com/strand-io/strand/stream/topology"
)

// queryLine starts the line an instance of a group prints once its query
// server serves: "query server of instance N: http://host:port".
const queryLine = "query server of instance"

// groupOptions are the App's options as instance -instance of the group
// of the accounts processors: the group is an Iggy membership log in the
// example's stream, the query address is the one listenHTTP got.
func (a *app) groupOptions() []topology.OpenOption {
	gopts := []iggy.GroupOption{iggy.WithSessionTimeout(a.cfg.sessionTimeout),
		iggy.WithMemberName(fmt.Sprintf("accounts-%d", a.cfg.instance)), iggy.WithGroupLogger(a.log)}
	if a.cfg.static {
		gopts = append(gopts, iggy.WithInstanceID(fmt.Sprintf("accounts-%d", a.cfg.instance)))
	}
	g := a.cl.Group(a.cfg.stream, gopts...)
	return []topology.OpenOption{topology.WithGroup(g), topology.WithQueryAddr(a.httpAddr),
		topology.WithSnapshotEvery(a.cfg.snapshotEvery), topology.WithStandbys(a.cfg.standbys)}
}

// groupStatus is what GET /group answers: this instance's part in the
// group. A -instances run and the tests read it to follow the group.
type groupStatus struct {
	Instance int    `json:"instance"`
	Member   uint64 `json:"member"` // 0 until Run joined the group
	Addr     string `json:"addr"`
	// Partitions are those this instance owns (restoring or serving).
	Partitions []partStatus `json:"partitions"`
	// Members is the group as this instance last read its membership.
	Members []memberStatus `json:"members"`
	// Standbys are the standby copies this instance keeps (-standbys).
	Standbys []standbyStatus `json:"standbys"`
}

// standbyStatus is a standby copy of a partition this instance does not
// own, and how current it is.
type standbyStatus struct {
	Partition uint32 `json:"partition"`
	Seq       uint64 `json:"seq"` // the last commit applied
	Lag       uint64 `json:"lag"` // changelog records not applied yet
	// StalenessMS is how long ago the copy held every commit of the
	// changelog (-1: not yet).
	StalenessMS int64 `json:"staleness_ms"`
}

// partStatus is one partition of an instance of a group.
type partStatus struct {
	Partition uint32 `json:"partition"`
	Phase     string `json:"phase"` // "restoring" or "serving"
	Epoch     uint64 `json:"epoch"`
	// Next is the committed checkpoint of a serving partition, End its
	// source's end offset as last seen.
	Next uint64 `json:"next"`
	End  uint64 `json:"end"`
	// Pending counts what its commits still have to publish: outbox
	// messages and dead letters.
	Pending int            `json:"pending"`
	Restore *restoreStatus `json:"restore,omitempty"`
}

// restoreStatus is how far the last restore of a partition went.
type restoreStatus struct {
	// From and Offset are where in the partition's changelog the restore
	// began and how far it read; End is where the changelog ended when it
	// began.
	From     uint64 `json:"from"`
	Offset   uint64 `json:"offset"`
	End      uint64 `json:"end"`
	Applied  int    `json:"applied"`  // commits and snapshot chunks applied
	Snapshot bool   `json:"snapshot"` // it began from a snapshot
	Reused   bool   `json:"reused"`   // the local store was current and kept
	Done     bool   `json:"done"`
	TookMS   int64  `json:"took_ms"`
}

// fraction returns how much of the restore is done, 0..1.
func (r *restoreStatus) fraction() float64 {
	switch {
	case r.Done:
		return 1
	case r.End <= r.From:
		return 0
	}
	return min(1, float64(r.Offset-r.From)/float64(r.End-r.From))
}

type memberStatus struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	Addr       string   `json:"addr"`
	Partitions []uint32 `json:"partitions"`
}

// status returns this instance's part in the group.
func (a *app) status(ctx context.Context) groupStatus {
	gs := groupStatus{Instance: a.cfg.instance, Addr: a.httpAddr, Partitions: []partStatus{}, Members: []memberStatus{}, Standbys: []standbyStatus{}}
	if a.app == nil {
		return gs
	}
	for _, sb := range a.app.Standbys() {
		age := int64(-1)
		if !sb.CurrentAt.IsZero() {
			age = max(time.Since(sb.CurrentAt), 0).Milliseconds()
		}
		gs.Standbys = append(gs.Standbys, standbyStatus{Partition: sb.Partition, Seq: sb.Seq, Lag: sb.Lag, StalenessMS: age})
	}
	if m := a.app.Membership(); m != nil {
		gs.Member = uint64(m.ID())
		for _, mb := range m.Members() {
			ms := memberStatus{ID: uint64(mb.ID), Name: mb.Name, Addr: mb.Addr, Partitions: []uint32{}}
			for _, po := range mb.Partitions {
				ms.Partitions = append(ms.Partitions, po.Partition)
			}
			gs.Members = append(gs.Members, ms)
		}
	}
	stats := map[uint32]int{}
	st := a.app.Stats()
	if len(st) > 0 {
		for i, ps := range st[0].Partitions {
			stats[ps.Partition] = i
		}
	}
	pendingDL := map[uint32]int{}
	if dls, err := a.app.PendingDeadLetters(ctx); err == nil {
		for _, dl := range dls {
			pendingDL[dl.Partition]++
		}
	} else {
		pendingDL = nil // unknown: count every partition as pending
	}
	for _, ps := range a.app.Ownership() {
		if ps.Phase == topology.NotOwned {
			continue
		}
		p := partStatus{Partition: ps.Partition, Phase: ps.Phase.String(), Epoch: uint64(ps.Epoch)}
		r := ps.Restore
		if r.End > 0 || r.Done || r.Applied > 0 {
			p.Restore = &restoreStatus{From: r.From, Offset: r.Offset, End: r.End, Applied: r.Applied,
				Snapshot: r.Snapshot, Reused: r.Reused, Done: r.Done, TookMS: r.Took.Milliseconds()}
		}
		if ps.Phase == topology.Serving {
			if i, ok := stats[ps.Partition]; ok {
				s := st[0].Partitions[i]
				p.Next, p.End, p.Pending = s.Next, s.End, s.OutboxPending
			}
			if next, ok, err := a.app.Checkpoint(a.cfg.source(), ps.Partition); err == nil && ok {
				p.Next = next // what the store holds, whatever the stats say
			}
			if pendingDL == nil {
				p.Pending++
			} else {
				p.Pending += pendingDL[ps.Partition]
			}
		}
		gs.Partitions = append(gs.Partitions, p)
	}
	return gs
}

// handleGroup answers GET /group.
func (a *app) handleGroup(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(a.status(r.Context()))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// describe renders an instance's partitions for a progress line:
// "0 3 5:restoring[####------]40%".
func (gs groupStatus) describe() string {
	if len(gs.Partitions) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(gs.Partitions))
	for _, p := range gs.Partitions {
		s := strconv.Itoa(int(p.Partition))
		if p.Phase == topology.Restoring.String() {
			s += ":restoring"
			if p.Restore != nil {
				s += bar(p.Restore.fraction(), 10)
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// bar draws a progress bar of width cells for f in 0..1.
func bar(f float64, width int) string {
	n := int(f*float64(width) + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]" + strconv.Itoa(int(f*100)) + "%"
}

// reportGroupProgress logs, every -progress interval, what this instance
// of a group owns, how far its serving partitions are and how far the
// restores of the others are, until ctx ends.
func (a *app) reportGroupProgress(ctx context.Context) {
	if a.cfg.progress <= 0 {
		return
	}
	t := time.NewTicker(a.cfg.progress)
	defer t.Stop()
	var last uint64
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gs := a.status(ctx)
		var next, lag uint64
		for _, p := range gs.Partitions {
			next += p.Next
			if p.End > p.Next {
				lag += p.End - p.Next
			}
		}
		now := time.Now()
		rate := 0.0
		if next >= last {
			rate = float64(next-last) / now.Sub(lastAt).Seconds()
		}
		last, lastAt = next, now
		a.log.Info("progress", "instance", a.cfg.instance, "member", gs.Member, "partitions", gs.describe(),
			"committed", next, "lag", lag, "rate", fmt.Sprintf("%.0f/s", rate))
	}
}
