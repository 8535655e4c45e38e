package changelog

import (
	"errors"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/executor"
	"github.com/strand-io/strand/stream/connector"
)

// leaseMembership grants partitions with epochs until a lease end.
type leaseMembership struct {
	connector.Membership // nil: only OwnsUntil and Owns are called
	owns                 map[uint32]connector.Epoch
	until                time.Time
}

func (m leaseMembership) Owns(p uint32) (connector.Epoch, bool) {
	e, ok := m.owns[p]
	return e, ok
}

func (m leaseMembership) OwnsUntil(p uint32) (connector.Epoch, time.Time, bool) {
	e, ok := m.owns[p]
	return e, m.until, ok
}

// SendDeadline is the lease end while the membership grants the
// partition with the epoch it is kept under; fenced otherwise; absent
// for a membership that cannot tell.
func TestSendDeadlineIsTheLeaseEnd(t *testing.T) {
	until := time.Now().Add(3 * time.Second)
	m := leaseMembership{owns: map[uint32]connector.Epoch{4: 9, 5: 12}, until: until}
	c := &Changelog{m: m, parts: map[uint32]*clogPart{
		4: {epoch: 9, lostC: make(chan struct{})},
		5: {epoch: 11, lostC: make(chan struct{})}, // the membership grants 5 with a newer epoch
	}}
	if got, ok, err := c.SendDeadline(4); err != nil || !ok || !got.Equal(until) {
		t.Errorf("SendDeadline(4) = %v, %v, %v; want the lease end %v", got, ok, err, until)
	}
	for _, p := range []uint32{5, 6} {
		if _, _, err := c.SendDeadline(p); !errors.Is(err, executor.ErrFenced) {
			t.Errorf("SendDeadline(%d) = %v, want ErrFenced", p, err)
		}
	}
	c.m = struct{ connector.Membership }{} // no LeaseHolder
	if _, ok, err := c.SendDeadline(4); err != nil || ok {
		t.Errorf("SendDeadline without a lease holder = %v, %v; want none, nil", ok, err)
	}
}
