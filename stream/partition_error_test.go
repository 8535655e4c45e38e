package stream_test

import (
	"errors"
	"testing"

	"github.com/strand-io/strand/stream"
)

func TestPartitionErrorNamesThePartitionOnceWithOnePrefix(t *testing.T) {
	cause := errors.New("boom")
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"a cause that names the partition after a verb", errors.New("strand: iggy: open s/log partition 3: connection refused"),
			`strand: source "s/log" partition 3 offset 7: poll: iggy: open: connection refused`},
		{"a cause that starts with the partition and offset", errors.New("strand: iggy: s/log partition 3 offset 9: bad strand headers"),
			`strand: source "s/log" partition 3 offset 7: poll: iggy: bad strand headers`},
		{"a cause that names another partition", errors.New("strand: iggy: poll s/log partition 4 at offset 2: closed"),
			`strand: source "s/log" partition 3 offset 7: poll: iggy: poll s/log partition 4 at offset 2: closed`},
		{"a cause without a prefix", cause, `strand: source "s/log" partition 3 offset 7: poll: boom`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pe := &stream.PartitionError{Source: "s/log", Partition: 3, Offset: 7, Op: stream.OpPoll, Err: c.err}
			if got := pe.Error(); got != c.want {
				t.Fatalf("Error() = %q\nwant      %q", got, c.want)
			}
			if !errors.Is(pe, c.err) {
				t.Fatal("errors.Is does not find the cause")
			}
		})
	}
}
