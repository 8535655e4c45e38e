package state

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkSpaceCheck measures what the disk reserve costs a commit on the
// real file system: a statfs at most every spaceCheckEvery, a lock and a
// clock read otherwise ("every" looks at the disk each time, as a commit
// does when commits are further apart than that).
func BenchmarkSpaceCheck(b *testing.B) {
	for _, c := range []struct {
		name  string
		every bool
	}{{"cached", false}, {"every", true}} {
		b.Run(c.name, func(b *testing.B) {
			g := &spaceGuard{fs: vfs.Default, dir: b.TempDir(), reserve: 1}
			for b.Loop() {
				if c.every {
					g.checkedAt = g.checkedAt.Add(-spaceCheckEvery)
				}
				if err := g.check(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
