package iggytest

import (
	"fmt"
	"os"
	"time"
)

// childAddrEnv, when set, is the address the child listens on.
const childAddrEnv = "IGGYTEST_CHILD_ADDR"

// runChild is the body of the child process of the kill -9 test: it opens a
// durable broker on dir, prints its address and serves until killed.
func runChild(dir string) {
	opts := []Option{WithDataDir(dir)}
	if addr := os.Getenv(childAddrEnv); addr != "" {
		opts = append(opts, WithAddr(addr))
	}
	srv, err := NewServer(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Println(srv.Addr())
	for {
		time.Sleep(time.Hour)
	}
}
