package main

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// A bounded run in one process with nothing installed: embedded broker,
// producer, processor and the end-of-run check, which prints (among timing
// lines, left out here) the verdict on dead letters and balances.
func Example() {
	var out strings.Builder
	err := run(context.Background(), []string{"-events", "5000", "-accounts", "100", "-poison", "3", "-http", "", "-progress", "0"}, &out, io.Discard)
	if err != nil {
		fmt.Println(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "dead letters:") || strings.HasPrefix(line, "check:") {
			fmt.Println(line)
		}
	}
	// Output:
	// dead letters: 3 in bank/accounts.dlq, every poison record exactly once: ok
	// check: 100 accounts, 5,000 events read back from the log: every balance equals the sequential reference: ok
}
