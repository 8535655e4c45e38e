package rebalance

import (
	"maps"
	"slices"
)

// Warm standbys (docs/design.md §15, "Standbys"). A partition this
// instance does not own may be one it keeps a standby copy of: a task
// tails the partition's changelog into the local store, so that when the
// membership grants the partition here (its owner died), the restore
// finds the rows current and reads only the changelog's tail. Which
// partitions are this instance's to keep is the membership's pure function
// membership.Standbys, handed to the Node as a StandbySet event.
//
// A standby copy runs only while the partition is NotOwned here and no
// generation processes it; every restore (a grant, a retry, a recheck)
// stops it first, so the restore and the standby never write the
// partition's rows at once.

// standbyPart is the standby state of one partition.
type standbyPart struct {
	running bool // a standby task runs (StartStandby, not stopped)
	backoff bool // it ended with an error: started again after RetryAfter
}

// stopStandby stops p's standby task before its restore.
func (n *Node) stopStandby(p uint32) {
	if sb := n.standby[p]; sb != nil && sb.running {
		sb.running = false
		n.emit(Action{Kind: StopStandby, P: p})
	}
}

// setStandbys applies a StandbySet event: the partitions this instance
// keeps standby copies of from now on.
func (n *Node) setStandbys(parts []uint32) {
	want := map[uint32]bool{}
	for _, p := range parts {
		want[p] = true
	}
	n.wantStandby = want
	for _, p := range slices.Sorted(maps.Keys(n.standby)) {
		if sb := n.standby[p]; sb.running && !want[p] {
			n.stopStandby(p)
		}
	}
}

// syncStandbys starts the standby tasks the Node wants and can run: the
// partition is not owned here, no generation processes it, and its last
// task did not just fail.
func (n *Node) syncStandbys() {
	for _, p := range slices.Sorted(maps.Keys(n.wantStandby)) {
		sb := n.standby[p]
		if sb == nil {
			sb = &standbyPart{}
			n.standby[p] = sb
		}
		if sb.running || sb.backoff || n.inGen(p) {
			continue
		}
		if st := n.parts[p]; st != nil && st.phase != NotOwned {
			continue
		}
		sb.running = true
		n.emit(Action{Kind: StartStandby, P: p})
	}
}

// standbyEnded: p's standby task ended on its own (an error); it starts
// again after RetryAfter if still wanted.
func (n *Node) standbyEnded(p uint32) {
	sb := n.standby[p]
	if sb == nil || !sb.running {
		return // stopped by the Node already
	}
	sb.running, sb.backoff = false, true
	n.emit(Action{Kind: SetTimer, Timer: Timer{Kind: StandbyRetry, P: p}, After: RetryAfter})
}

func (n *Node) standbyRetry(p uint32) {
	if sb := n.standby[p]; sb != nil {
		sb.backoff = false
	}
}

// Standbys returns the partitions whose standby task runs, in partition
// order.
func (n *Node) Standbys() []uint32 {
	var out []uint32
	for _, p := range slices.Sorted(maps.Keys(n.standby)) {
		if n.standby[p].running {
			out = append(out, p)
		}
	}
	return out
}
