package rebalance

import (
	"context"
	"slices"

	groupstate "github.com/strand-io/strand/internal/scaleout/membership"
)

// StandbyChangelog is a Changelog that also keeps standby copies
// (docs/design.md §15, "Standbys").
type StandbyChangelog interface {
	Changelog
	// Standby keeps the local rows of p, a partition this instance does
	// not own, current from p's changelog until ctx ends (then nil) or it
	// fails. It never writes a fence and never logs a commit: it only
	// applies the valid history, so that a later Restore of p here reads
	// only the tail.
	Standby(ctx context.Context, p uint32) error
}

// standbyTick is a Loop-internal event: compute the standby set again.
const standbyTick EventKind = 201

// startStandbys hands the node its first standby set and arms the timer
// that computes it again (membership changes other members see, such as
// a join elsewhere, reach this instance by no assignment).
func (l *Loop) startStandbys(ctx context.Context) error {
	if l.cfg.Standbys == 0 {
		return nil
	}
	if err := l.refreshStandbys(ctx); err != nil {
		return err
	}
	l.armTick()
	return nil
}

func (l *Loop) armTick() {
	l.tick = l.cfg.Clock.AfterFunc(l.cfg.StandbyEvery, func() { l.post(Event{Kind: standbyTick}) })
}

// refreshStandbys computes this member's standby set from the membership
// and steps the node with it when it changed.
func (l *Loop) refreshStandbys(ctx context.Context) error {
	if l.cfg.Standbys == 0 {
		return nil
	}
	m := l.cfg.Membership
	id := m.ID()
	var set []uint32
	if id != 0 {
		set = groupstate.StandbyOf(groupstate.Standbys(m.Members(), l.cfg.Partitions, l.cfg.Standbys), id)
	}
	if slices.Equal(set, l.standbys) {
		return nil
	}
	l.standbys = set
	l.log.Info("strand: standby copies", "partitions", set)
	return l.step(ctx, Event{Kind: StandbySet, Standby: slices.Clone(set)})
}

func (l *Loop) startStandby(ctx context.Context, p uint32) {
	sc := l.cfg.Changelog.(StandbyChangelog) // checked by NewLoop
	l.startTask(ctx, p, 0, func(ctx context.Context) Event {
		err := sc.Standby(ctx, p)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("strand: standby copy of a partition failed; starting it again", "partition", p, "err", err)
		}
		return Event{Kind: StandbyEnded, P: p, Err: err}
	})
}
