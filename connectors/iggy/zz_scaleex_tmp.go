package iggy

// TEMPORARY (branch scaleex): a stand-in for Client.Group, which another
// branch is writing. Deleted before the branch's final commit.

import (
	"context"
	"sync"

	"github.com/strand-io/strand/stream"
)

// Group is a stand-in.
func (c *Client) Group(streamName string, opts ...GroupOption) stream.Group {
	return tmpGroup{c, streamName, opts}
}

type tmpGroup struct {
	c    *Client
	s    string
	opts []GroupOption
}

func (g tmpGroup) Join(ctx context.Context, topology string, partitions uint32, addr string) (stream.Membership, error) {
	m, err := g.c.JoinGroup(ctx, g.s, topology, partitions, append(append([]GroupOption(nil), g.opts...), WithQueryAddr(addr))...)
	if err != nil {
		return nil, err
	}
	tm := &tmpMembership{m: m, out: make(chan stream.Assignment), stop: make(chan struct{})}
	tm.wg.Add(1)
	go func() {
		defer tm.wg.Done()
		defer close(tm.out)
		for a := range m.Assignments() {
			select {
			case tm.out <- stream.Assignment{Kind: stream.AssignmentKind(a.Kind), Partition: a.Partition, Epoch: stream.Epoch(a.Epoch), Reason: stream.LossReason(a.Reason)}:
			case <-tm.stop:
				return
			}
		}
	}()
	return tm, nil
}

type tmpMembership struct {
	m    *Membership
	out  chan stream.Assignment
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func (t *tmpMembership) Assignments() <-chan stream.Assignment { return t.out }
func (t *tmpMembership) Owns(p uint32) (stream.Epoch, bool) {
	e, ok := t.m.Owns(p)
	return stream.Epoch(e), ok
}
func (t *tmpMembership) Release(ctx context.Context, p uint32) error { return t.m.Release(ctx, p) }
func (t *tmpMembership) Members() []stream.Member {
	ms := t.m.Members()
	out := make([]stream.Member, len(ms))
	for i, m := range ms {
		out[i] = tmpMember(m)
	}
	return out
}
func tmpMember(m Member) stream.Member {
	sm := stream.Member{ID: stream.MemberID(m.ID), Name: m.Name, Addr: m.Addr, LastSeen: m.LastSeen}
	for _, p := range m.Partitions {
		sm.Partitions = append(sm.Partitions, stream.PartitionOwnership{Partition: p.Partition, Epoch: stream.Epoch(p.Epoch), Revoking: p.Revoking})
	}
	return sm
}
func (t *tmpMembership) Owner(p uint32) (stream.Member, stream.Epoch, bool) {
	m, e, ok := t.m.Owner(p)
	return tmpMember(m), stream.Epoch(e), ok
}
func (t *tmpMembership) ID() stream.MemberID { return stream.MemberID(t.m.ID()) }
func (t *tmpMembership) Err() error          { return t.m.Err() }
func (t *tmpMembership) Close() error {
	t.once.Do(func() { close(t.stop) })
	err := t.m.Close()
	t.wg.Wait()
	return err
}
