package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/strand-io/strand/connectors/iggy"
)

// connFlags are the Iggy connection flags; the environment gives their
// defaults.
type connFlags struct {
	addr, user, password string
	protocol             string
	stderr               io.Writer // the client's warnings
}

func (c *connFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	c.stderr = fs.Output()
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&c.addr, "addr", env("STRAND_IGGY_ADDR", "127.0.0.1:8090"), "Iggy server address (env STRAND_IGGY_ADDR)")
	fs.StringVar(&c.user, "user", env("STRAND_IGGY_USER", "iggy"), "Iggy user (env STRAND_IGGY_USER)")
	fs.StringVar(&c.protocol, "protocol", env("STRAND_IGGY_PROTOCOL", "auto"), "Iggy protocol: 0.10, 0.8 or auto (env STRAND_IGGY_PROTOCOL)")
	// The default is not shown in the usage text: it may come from the
	// environment.
	c.password = env("STRAND_IGGY_PASSWORD", "iggy")
	fs.Func("password", "Iggy password (env STRAND_IGGY_PASSWORD; never printed)", func(s string) error {
		c.password = s
		return nil
	})
}

// connect connects to the server. Its errors name the address and the
// user, never the password.
func (c *connFlags) connect(ctx context.Context) (*iggy.Client, error) {
	proto, err := iggy.ParseProtocol(c.protocol)
	if err != nil {
		return nil, err
	}
	cl, err := iggy.Connect(ctx, c.addr, iggy.WithCredentials(c.user, c.password), iggy.WithProtocol(proto), iggy.WithLogger(quietLogger(c.stderr)))
	if err != nil {
		msg := err.Error()
		if len(c.password) >= 6 { // shorter ones are placeholders ("iggy") that would mask words
			msg = strings.ReplaceAll(msg, c.password, "***")
		}
		return nil, fmt.Errorf("connect to Iggy at %s as %q: %s", c.addr, c.user, msg)
	}
	return cl, nil
}

// splitTopic splits "stream/topic".
func splitTopic(name string) (string, string, error) {
	s, t, ok := strings.Cut(name, "/")
	if !ok || s == "" || t == "" || strings.Contains(t, "/") {
		return "", "", usagef("topic %q: want STREAM/TOPIC", trunc(name, 200))
	}
	return s, t, nil
}
