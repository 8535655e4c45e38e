package queryserver

import (
	"errors"
	"net/http"
	"time"
)

// GroupView is what GET /group answers for an App that is an instance of a
// group (docs/design.md §15): this instance's member id and the partitions
// it owns or restores, with their phases, epochs and restore progress, and
// the group's members as the instance last read its membership, with what
// each owns and the query address it announced.
type GroupView struct {
	Member     uint64          `json:"member"` // 0 while Run is not in the group
	Partitions []PartitionView `json:"partitions"`
	Members    []MemberView    `json:"members"`
	// Standbys are the standby copies this instance keeps
	// (topology.WithStandbys), with how current each is.
	Standbys []StandbyView `json:"standbys"`
}

// StandbyView is topology.StandbyStatus as JSON: a standby copy of a
// partition this instance does not own.
type StandbyView struct {
	Partition uint32    `json:"partition"`
	Epoch     uint64    `json:"epoch"` // of the owner whose commits it applies
	Seq       uint64    `json:"seq"`   // its last commit applied
	Offset    uint64    `json:"offset"`
	End       uint64    `json:"end"`
	Lag       uint64    `json:"lag"` // changelog records not applied yet
	CurrentAt time.Time `json:"current_at"`
	// StalenessMS is how long ago the copy was last current (-1: not
	// yet).
	StalenessMS int64  `json:"staleness_ms"`
	Applied     int    `json:"applied"`
	Mode        string `json:"mode"`
}

// PartitionView is one partition this instance owns or restores.
type PartitionView struct {
	Partition uint32 `json:"partition"`
	Phase     string `json:"phase"` // "restoring" or "serving"
	Epoch     uint64 `json:"epoch"`
	// Restore is how far the partition's last restore went.
	Restore RestoreView `json:"restore"`
}

// RestoreView is topology.RestoreProgress as JSON.
type RestoreView struct {
	From     uint64 `json:"from"`
	Offset   uint64 `json:"offset"`
	End      uint64 `json:"end"`
	Applied  int    `json:"applied"`
	Snapshot bool   `json:"snapshot"`
	Reused   bool   `json:"reused"`
	Done     bool   `json:"done"`
	TookMS   int64  `json:"took_ms"`
}

// MemberView is one member of the group.
type MemberView struct {
	ID         uint64      `json:"id"`
	Name       string      `json:"name"`
	Addr       string      `json:"addr"`
	LastSeen   time.Time   `json:"last_seen"`
	Partitions []OwnedView `json:"partitions"`
}

// OwnedView is a partition a member owns.
type OwnedView struct {
	Partition uint32 `json:"partition"`
	Epoch     uint64 `json:"epoch"`
	Revoking  bool   `json:"revoking"`
}

// errNoGroup answers GET /group of an App outside a group.
var errNoGroup = errors.New("this App is not an instance of a group (topology.WithGroup)")

// groupView returns the App's group view, or false outside a group.
func (s *Server) groupView() (GroupView, bool) {
	if !s.app.InGroup() {
		return GroupView{}, false
	}
	v := GroupView{Partitions: []PartitionView{}, Members: []MemberView{}, Standbys: []StandbyView{}}
	now := time.Now()
	for _, sb := range s.app.Standbys() {
		age := int64(-1)
		if !sb.CurrentAt.IsZero() {
			age = max(now.Sub(sb.CurrentAt), 0).Milliseconds()
		}
		v.Standbys = append(v.Standbys, StandbyView{Partition: sb.Partition, Epoch: uint64(sb.Epoch), Seq: sb.Seq, Offset: sb.Offset,
			End: sb.End, Lag: sb.Lag, CurrentAt: sb.CurrentAt, StalenessMS: age, Applied: sb.Applied, Mode: sb.Mode})
	}
	for _, ps := range s.app.Ownership() {
		r := ps.Restore
		v.Partitions = append(v.Partitions, PartitionView{Partition: ps.Partition, Phase: ps.Phase.String(), Epoch: uint64(ps.Epoch),
			Restore: RestoreView{From: r.From, Offset: r.Offset, End: r.End, Applied: r.Applied, Snapshot: r.Snapshot,
				Reused: r.Reused, Done: r.Done, TookMS: r.Took.Milliseconds()}})
	}
	if m := s.app.Membership(); m != nil {
		v.Member = uint64(m.ID())
		for _, mb := range m.Members() {
			mv := MemberView{ID: uint64(mb.ID), Name: mb.Name, Addr: mb.Addr, LastSeen: mb.LastSeen, Partitions: []OwnedView{}}
			for _, po := range mb.Partitions {
				mv.Partitions = append(mv.Partitions, OwnedView{Partition: po.Partition, Epoch: uint64(po.Epoch), Revoking: po.Revoking})
			}
			v.Members = append(v.Members, mv)
		}
	}
	return v, true
}

func (s *Server) handleGroup(w http.ResponseWriter, r *http.Request) {
	v, ok := s.groupView()
	if !ok {
		writeError(w, http.StatusNotFound, errNoGroup)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
