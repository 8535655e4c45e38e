package iggy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ierror "github.com/apache/iggy/foreign/go/errors"
	"github.com/strand-io/strand/stream/connector"
)

// Bookmarks are named offsets per partition kept by the broker: set, read
// back, overwritten, kept apart by name and from Advise's consumer, and
// read by another Client.
func TestBookmarks(t *testing.T) {
	tg := newTarget(t)
	c := tg.connect(t)
	s, topic := tg.topic(t, c, 3)
	name := s + "/" + topic
	ctx := ctxT(t, 20*time.Second)
	sink, err := NewSink(ctx, c, s, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	var msgs []connector.Message // offsets 0..9 in partition 0, 0..4 in partition 1
	for i := range 15 {
		msgs = append(msgs, connector.Message{Key: []byte("k"), Payload: []byte("p"), Partition: uint32(i / 10), HasPartition: true})
	}
	if err := sink.Send(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var bm connector.Bookmarks = c
	check := func(c connector.Bookmarks, p uint32, bname string, want uint64, wantOK bool) {
		t.Helper()
		got, ok, err := c.Bookmark(ctx, name, p, bname)
		if err != nil || ok != wantOK || got != want {
			t.Fatalf("Bookmark(%d, %q) = %d %v %v, want %d %v", p, bname, got, ok, err, want, wantOK)
		}
	}
	check(bm, 0, "snapshot", 0, false)
	if err := bm.SetBookmark(ctx, name, 0, "snapshot", 4); err != nil {
		t.Fatal(err)
	}
	check(bm, 0, "snapshot", 4, true)
	if err := bm.SetBookmark(ctx, name, 0, "snapshot", 2); err != nil { // backwards too
		t.Fatal(err)
	}
	check(bm, 0, "snapshot", 2, true)
	if err := bm.SetBookmark(ctx, name, 0, "snapshot", 6); err != nil {
		t.Fatal(err)
	}
	check(bm, 0, "snapshot", 6, true)
	check(bm, 0, "other", 0, false)
	check(bm, 1, "snapshot", 0, false) // per partition
	if err := bm.SetBookmark(ctx, name, 1, "snapshot", 0); err != nil {
		t.Fatal(err)
	}
	check(bm, 1, "snapshot", 0, true) // offset 0 is a bookmark, not none
	// Advise's consumer of the same name is another consumer.
	src, err := NewSource(c, s, topic, WithConsumer("snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	r := open(t, src, 0, 0)
	if err := r.Advise(ctx, 10); err != nil {
		t.Fatal(err)
	}
	check(bm, 0, "snapshot", 6, true)
	if _, err := NewSource(c, s, topic, WithConsumer(bookmarkPrefix+"snapshot")); err == nil || !strings.Contains(err.Error(), "iggy.WithConsumer") {
		t.Fatalf("WithConsumer with the bookmark prefix: %v", err)
	}
	// Beyond the partition's last offset, and in an empty partition.
	if err := bm.SetBookmark(ctx, name, 0, "snapshot", 10); !errors.Is(err, ierror.ErrInvalidOffset) {
		t.Fatalf("SetBookmark beyond the end: %v, want ErrInvalidOffset", err)
	}
	if err := bm.SetBookmark(ctx, name, 2, "snapshot", 0); !errors.Is(err, ierror.ErrInvalidOffset) {
		t.Fatalf("SetBookmark in an empty partition: %v, want ErrInvalidOffset", err)
	}
	check(bm, 0, "snapshot", 6, true)
	check(bm, 2, "snapshot", 0, false)
	// A partition, topic or stream that does not exist is an error.
	if _, _, err := bm.Bookmark(ctx, name, 3, "snapshot"); !errors.Is(err, ierror.ErrPartitionNotFound) {
		t.Fatalf("Bookmark of partition 3 of 3: %v", err)
	}
	if err := bm.SetBookmark(ctx, name, 3, "snapshot", 0); !errors.Is(err, ierror.ErrPartitionNotFound) {
		t.Fatalf("SetBookmark of partition 3 of 3: %v", err)
	}
	if _, _, err := bm.Bookmark(ctx, s+"/nope", 0, "snapshot"); !errors.Is(err, ierror.ErrTopicIdNotFound) {
		t.Fatalf("Bookmark of a missing topic: %v", err)
	}
	if _, _, err := bm.Bookmark(ctx, s+"-nope/"+topic, 0, "snapshot"); !errors.Is(err, ierror.ErrStreamIdNotFound) {
		t.Fatalf("Bookmark of a missing stream: %v", err)
	}
	if err := bm.SetBookmark(ctx, s+"/nope", 0, "snapshot", 0); !errors.Is(err, ierror.ErrTopicIdNotFound) {
		t.Fatalf("SetBookmark of a missing topic: %v", err)
	}
	// Names and topic names out of range.
	for _, bad := range []string{"", strings.Repeat("n", MaxBookmarkName+1)} {
		if _, _, err := bm.Bookmark(ctx, name, 0, bad); err == nil {
			t.Fatalf("Bookmark named %d bytes: no error", len(bad))
		}
		if err := bm.SetBookmark(ctx, name, 0, bad, 1); err == nil {
			t.Fatalf("SetBookmark named %d bytes: no error", len(bad))
		}
	}
	long := strings.Repeat("n", MaxBookmarkName)
	if err := bm.SetBookmark(ctx, name, 0, long, 9); err != nil {
		t.Fatal(err)
	}
	check(bm, 0, long, 9, true)
	for _, bad := range []string{topic, "/" + topic, s + "/"} {
		if _, _, err := bm.Bookmark(ctx, bad, 0, "snapshot"); err == nil {
			t.Fatalf("Bookmark of topic %q: no error", bad)
		}
	}
	// Another Client (a restarted instance) reads the same bookmarks.
	c.Close()
	if _, _, err := bm.Bookmark(ctx, name, 0, "snapshot"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Bookmark on a closed Client: %v", err)
	}
	c2 := tg.connect(t)
	check(c2, 0, "snapshot", 6, true)
	check(c2, 1, "snapshot", 0, true)
	check(c2, 0, long, 9, true)
	check(c2, 0, "other", 0, false)
	for i := range 3 {
		n := fmt.Sprint("b", i)
		if err := c2.SetBookmark(ctx, name, 1, n, uint64(i)); err != nil {
			t.Fatal(err)
		}
		check(c2, 1, n, uint64(i), true)
	}
}
