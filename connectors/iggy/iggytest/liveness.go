package iggytest

import "time"

// heartbeatThreshold is how many intervals a client may stay silent
// (server 0.8.0's heartbeat verifier: 1.2 intervals).
const heartbeatThreshold = 1.2

// WithHeartbeat turns on client liveness as server 0.8.0 does with
// heartbeat.enabled and heartbeat.interval: every interval the broker
// looks for clients whose last Ping is older than 1.2 intervals (a
// connection counts as a ping when it opens). Such a client is forgotten:
// it leaves its consumer groups (their partitions are dealt to the other
// members), disappears from GetClients, and its session is stale, so its
// next command that needs a login is answered with status 30
// (StaleClient) and its connection is closed. Ping keeps working on a stale
// session, as on the server. The SDK pings every 5 s, so an interval below
// about 5 s drops healthy SDK clients too. The default (d ≤ 0) is off, as
// in the server's default configuration.
func WithHeartbeat(interval time.Duration) Option {
	return optionFunc(func(c *config) { c.heartbeat = interval })
}

func (s *Server) heartbeatLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-tick.C:
			s.verifyHeartbeats(now)
		}
	}
}

// verifyHeartbeats forgets the clients that have not pinged in time.
func (s *Server) verifyHeartbeats(now time.Time) {
	limit := now.Add(-time.Duration(heartbeatThreshold * float64(s.cfg.heartbeat))).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sess := range s.clients {
		if sess.lastBeat.Load() >= limit {
			continue
		}
		s.log.Warn("iggytest: stale client, no heartbeat", "client", id, "addr", sess.addr)
		sess.stale.Store(true)
		s.leaveAllGroupsLocked(sess)
		delete(s.clients, id)
	}
}
