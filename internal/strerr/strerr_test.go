package strerr

import (
	"errors"
	"io/fs"
	"testing"
)

func TestErrorfKeepsOnePrefixAndTheChain(t *testing.T) {
	inner := errors.New("strand: store closed")
	pathErr := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	cases := []struct {
		name string
		err  error
		want string
		is   []error
	}{
		{"a strand error wrapped", Errorf("strand: table balances: %w", inner), "strand: table balances: store closed", []error{inner}},
		{"wrapped twice", Errorf("strand: open: %w", Errorf("strand: table t: %w", inner)), "strand: open: table t: store closed", []error{inner}},
		{"two wrapped", Errorf("strand: %w; %w", inner, pathErr), "strand: store closed; open /x: file does not exist", []error{inner, fs.ErrNotExist}},
		{"a foreign error wrapped", Errorf("strand: open store: %w", pathErr), "strand: open store: open /x: file does not exist", []error{fs.ErrNotExist}},
		{"a prefix inside a wrapped message", Errorf("strand: run: %w", Errorf("partition 3: %w", inner)), "strand: run: partition 3: store closed", []error{inner}},
		{"a %v argument", Errorf("strand: run: %v (%w)", inner, fs.ErrClosed), "strand: run: store closed (file already closed)", []error{fs.ErrClosed}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.err.Error(); got != c.want {
				t.Fatalf("Error() = %q, want %q", got, c.want)
			}
			for _, target := range c.is {
				if !errors.Is(c.err, target) {
					t.Fatalf("errors.Is(%v, %v) = false", c.err, target)
				}
			}
			var pe *fs.PathError
			if errors.Is(c.err, fs.ErrNotExist) && !errors.As(c.err, &pe) {
				t.Fatal("errors.As does not find the *fs.PathError")
			}
		})
	}
}
