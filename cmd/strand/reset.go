package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/strand-io/strand/stream/topology"
)

// reset runs `strand reset -dir DIR [-dry-run]` (topology.Reset).
func reset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("reset", stderr)
	dir := fs.String("dir", "", "the state directory the App was opened with (required)")
	dry := fs.Bool("dry-run", false, "say what the reset would do and change nothing")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("reset: -dir is required")
	}
	var opts []topology.ResetOption
	if *dry {
		opts = append(opts, topology.WithDryRun())
	}
	r, err := topology.Reset(ctx, *dir, opts...)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return storeError(*dir, err)
		}
		return err
	}
	fmt.Fprint(stdout, r.String())
	if !r.DryRun {
		fmt.Fprintln(stdout, "start the App (the same topology or a changed one): it rebuilds every table from the log and publishes nothing again")
	}
	return nil
}
