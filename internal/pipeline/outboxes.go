package pipeline

import "github.com/strand-io/strand/internal/outbox"

// outboxConfig is what the processor's outboxes (internal/outbox) need of
// it: its store, sinks, options and stats.
func (p *Processor) outboxConfig() outbox.Config {
	h := p.opts.hooks
	return outbox.Config{
		Source: p.name, DB: p.db, Log: p.log,
		DeadLetterSink: p.opts.sink, Sinks: p.opts.outboxSinks,
		Backoff: p.opts.dlqBackoff, Grace: p.opts.outboxGrace,
		Gate: p.opts.gate, Check: p.opts.check, Deadline: p.opts.sendDeadline,
		Hooks: outbox.Hooks{
			BeforeDeadLetterSend: h.BeforeDeadLetterSend, AfterDeadLetterSend: h.AfterDeadLetterSend,
			AfterDeadLetterDelete: h.AfterDeadLetterDelete,
			BeforeOutboxSend:      h.BeforeOutboxSend, AfterOutboxSend: h.AfterOutboxSend,
		},
		Update:  p.update,
		Pending: p.outboxPending,
	}
}

// outboxPending returns how many outbox rows of partition pt wait to be
// published, as Stats counts them.
func (p *Processor) outboxPending(pt uint32) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.stats[pt]
	if ps == nil {
		return 0
	}
	return p.outboxBase[pt] + int64(ps.OutboxCommitted) - int64(ps.OutboxPublished)
}
