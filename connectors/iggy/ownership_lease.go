package iggy

import (
	"time"

	"github.com/strand-io/strand/stream/connector"
)

// OwnsUntil is Owns with the end of this member's lease
// (connector.LeaseHolder): past it the member stops claiming p unless a
// record it reads back renews the lease first.
func (m *Membership) OwnsUntil(p uint32) (Epoch, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.claims[p]
	if !ok || !time.Now().Before(m.leaseEnd) {
		return 0, time.Time{}, false
	}
	return e, m.leaseEnd, true
}

var _ connector.LeaseHolder = (*Membership)(nil)
