package iggytest

import "net"

// ClusterNode describes another node of a cluster for WithCluster: its
// name, the address (host or IP) clients should dial and its ports. A zero
// port stands for this broker's own port of that transport, as in the
// server's configuration.
type ClusterNode struct {
	Name                string
	IP                  string
	TCP, QUIC, HTTP, WS uint16
}

// Cluster is the cluster configuration reported by GetClusterMetadata, as
// server 0.8.0 reports it with cluster.enabled: this node first (leader
// unless Follower), then Others, each with the opposite role. The broker
// replicates nothing: the configuration only lets clients find the leader,
// which is what the SDK's leader redirection uses.
type Cluster struct {
	Name     string // cluster name
	NodeName string // this node's name
	IP       string // this node's address as clients should dial it; "" is the listener's host
	Follower bool   // this node is a follower; the others are then leaders
	Others   []ClusterNode
}

// WithCluster makes GetClusterMetadata describe a cluster instead of the
// default single node ("single-node"/"iggy-node", leader, healthy).
func WithCluster(cl Cluster) Option {
	return optionFunc(func(c *config) {
		cp := cl
		cp.Others = append([]ClusterNode(nil), cl.Others...)
		c.cluster = &cp
	})
}

const (
	roleLeader   uint8 = 0
	roleFollower uint8 = 1

	defaultQUICPort = 8080
	defaultHTTPPort = 3000
	defaultWSPort   = 8092
)

func (c *conn) clusterMetadata() ([]byte, error) {
	if err := c.authed(); err != nil {
		return nil, err
	}
	host := "127.0.0.1"
	if h, _, err := net.SplitHostPort(c.s.addr); err == nil {
		host = h
	}
	cl := c.s.cfg.cluster
	if cl == nil {
		e := c.ok().str32("single-node").u32(1)
		e = e.str32("iggy-node").str32(host).u16(c.s.tcport).u16(defaultQUICPort).u16(defaultHTTPPort).u16(defaultWSPort)
		return e.u8(roleLeader).u8(0), nil
	}
	self, other := roleLeader, roleFollower
	if cl.Follower {
		self, other = roleFollower, roleLeader
	}
	ip := cl.IP
	if ip == "" {
		ip = host
	}
	e := c.ok().str32(cl.Name).u32(uint32(1 + len(cl.Others)))
	e = e.str32(cl.NodeName).str32(ip).u16(c.s.tcport).u16(defaultQUICPort).u16(defaultHTTPPort).u16(defaultWSPort)
	e = e.u8(self).u8(0)
	for _, n := range cl.Others {
		e = e.str32(n.Name).str32(n.IP).u16(orPort(n.TCP, c.s.tcport)).u16(orPort(n.QUIC, defaultQUICPort))
		e = e.u16(orPort(n.HTTP, defaultHTTPPort)).u16(orPort(n.WS, defaultWSPort)).u8(other).u8(0)
	}
	return e, nil
}

func orPort(p, def uint16) uint16 {
	if p == 0 {
		return def
	}
	return p
}
