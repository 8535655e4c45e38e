package iggy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strand-io/strand/internal/testrun"
	"github.com/strand-io/strand/stream/connector"
)

// runMember answers the group's requests as an engine would: it hands back
// every partition it is asked to give up. It returns when Assignments is
// closed.
func runMember(t *testing.T, m connector.Membership, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for a := range m.Assignments() {
			if a.Kind != connector.Revoking {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := m.HandBack(ctx, a.Partition); err != nil && !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrClosed) {
				t.Errorf("hand back %d: %v", a.Partition, err)
			}
			cancel()
		}
	}()
}

// Two members joined through Client.Group split 8 partitions 4 and 4, and
// each sees the other's query address through Members and Owner.
func TestGroupSplitsPartitionsAndSharesAddresses(t *testing.T) {
	tg := newTarget(t)
	admin := tg.connect(t)
	s, _ := tg.topic(t, admin, 1)
	opts := []GroupOption{WithSessionTimeout(testSession), WithHeartbeat(testHeartbeat),
		WithGroupPollInterval(testPoll), WithGroupLogger(testLogger()),
		WithQueryAddr("overridden by Join")}
	addrs := []string{"10.0.0.1:7000", "10.0.0.2:7000"}
	var ms []connector.Membership
	var wg sync.WaitGroup
	defer func() {
		for _, m := range ms {
			m.Close()
		}
		wg.Wait()
	}()
	for i, addr := range addrs {
		var g connector.Group = tg.connect(t).Group(s, append(opts, WithMemberName(addr))...)
		m, err := g.Join(ctxT(t, 10*time.Second), "accounts", 8, addr)
		if err != nil {
			t.Fatalf("Join %d: %v", i, err)
		}
		if _, ok := m.(*Membership); !ok {
			t.Fatalf("Join returned a %T", m)
		}
		ms = append(ms, m)
		runMember(t, m, &wg)
	}
	// settled: every partition owned by exactly one member, 4 each, and
	// both members' views agree with what the owners claim.
	settled := func() string {
		owner := map[uint32]connector.MemberID{}
		for _, m := range ms {
			n := 0
			for p := range uint32(8) {
				if _, ok := m.Owns(p); ok {
					if o, dup := owner[p]; dup {
						return fmt.Sprintf("partition %d owned by %d and %d", p, o, m.ID())
					}
					owner[p] = m.ID()
					n++
				}
			}
			if n != 4 {
				return fmt.Sprintf("member %d owns %d partitions", m.ID(), n)
			}
		}
		for _, m := range ms {
			mbs := m.Members()
			if len(mbs) != 2 {
				return fmt.Sprintf("member %d sees %d members", m.ID(), len(mbs))
			}
			for _, mb := range mbs {
				if len(mb.Partitions) != 4 {
					return "a member's view is not settled"
				}
				for _, po := range mb.Partitions {
					if po.Revoking || owner[po.Partition] != mb.ID {
						return "a member's view is not settled"
					}
				}
			}
		}
		return ""
	}
	testrun.WaitFor(t, bound, func() error {
		if why := settled(); why != "" {
			return fmt.Errorf("the group did not settle: %s", why)
		}
		return nil
	})
	addrOf := map[connector.MemberID]string{ms[0].ID(): addrs[0], ms[1].ID(): addrs[1]}
	for i, m := range ms {
		for _, mb := range m.Members() {
			if mb.Addr != addrOf[mb.ID] || mb.Name != addrOf[mb.ID] {
				t.Fatalf("member %d sees member %d with name %q addr %q, want %q", i, mb.ID, mb.Name, mb.Addr, addrOf[mb.ID])
			}
		}
		for p := range uint32(8) {
			mb, e, ok := m.Owner(p)
			if !ok {
				t.Fatalf("member %d: Owner(%d) found none", i, p)
			}
			var self connector.Membership
			for _, o := range ms {
				if o.ID() == mb.ID {
					self = o
				}
			}
			if self == nil || mb.Addr != addrOf[mb.ID] {
				t.Fatalf("member %d: Owner(%d) = %+v, not a member", i, p, mb)
			}
			if oe, owns := self.Owns(p); !owns || oe != e {
				t.Fatalf("member %d: Owner(%d) says member %d epoch %d; it owns it: %v epoch %d", i, p, mb.ID, e, owns, oe)
			}
		}
	}
}

// An empty address announces none; an invalid option fails Join with an
// error naming it, and no Membership.
func TestGroupJoinOptionsAndEmptyAddress(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, _ := tg.topic(t, c, 1)
	m, err := c.Group(s, WithSessionTimeout(time.Millisecond)).Join(ctxT(t, 5*time.Second), "accounts", 2, "x:1")
	if err == nil || m != nil || !strings.Contains(err.Error(), "iggy.WithSessionTimeout") {
		t.Fatalf("Join with a 1ms session timeout: %v, %v", m, err)
	}
	g := c.Group(s, WithSessionTimeout(testSession), WithHeartbeat(testHeartbeat), WithGroupPollInterval(testPoll),
		WithGroupLogger(testLogger()), WithQueryAddr("from the options"))
	m, err = g.Join(ctxT(t, 5*time.Second), "accounts", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	runMember(t, m, &wg)
	defer func() { m.Close(); wg.Wait() }()
	mbs := m.Members()
	if len(mbs) != 1 || mbs[0].ID != m.ID() || mbs[0].Addr != "" {
		t.Fatalf("members %+v, want this one with no address", mbs)
	}
	if _, err := g.Join(ctxT(t, 5*time.Second), "accounts", 3, ""); !errors.Is(err, ErrGroupMismatch) {
		t.Fatalf("Join with another partition count: %v", err)
	}
}
