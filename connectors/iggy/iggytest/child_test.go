package iggytest

import (
	"fmt"
	"os"
	"time"
)

// runChild is the body of the child process of the kill -9 test: it opens a
// durable broker on dir, prints its address and serves until killed.
func runChild(dir string) {
	srv, err := NewServer(WithDataDir(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Println(srv.Addr())
	for {
		time.Sleep(time.Hour)
	}
}
