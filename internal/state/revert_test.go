package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// row is a value that real folds change in place: a map of slices.
type row map[string][]int

// TestPropertyFailedFoldLeavesNoTrace: random Updates (and Read, change,
// Revert) that change a shared value in place — appending, overwriting,
// deleting — and then fail or succeed, over a few keys, across random
// commits and discards. After every step the Txn's view equals a model of
// only the successful changes, and after every commit or discard the rows
// in Pebble and what the next Txn reads (through the value cache) are
// byte-identical to the model's encoding.
func TestPropertyFailedFoldLeavesNoTrace(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		db := openMem(t, nil)
		defer mustClose(t, db)
		tab := NewTable("rows", String(), JSON[row]())
		if err := db.Attach(tab); err != nil {
			rt.Fatal(err)
		}
		enc := func(v row) string {
			if v == nil {
				v = row{}
			}
			b, err := json.Marshal(v)
			if err != nil {
				rt.Fatal(err)
			}
			return string(b)
		}
		clone := func(v row) row {
			var out row
			if err := json.Unmarshal([]byte(enc(v)), &out); err != nil {
				rt.Fatal(err)
			}
			return out
		}
		committed := map[string]row{} // what Pebble must hold
		view := map[string]row{}      // what the open Txn must show
		keys := []string{"a", "b", "c"}
		boom := errors.New("boom")
		mutate := func(v row, r *rapid.T) {
			for range rapid.IntRange(1, 3).Draw(r, "changes") {
				f := fmt.Sprint(rapid.IntRange(0, 2).Draw(r, "field"))
				switch rapid.IntRange(0, 3).Draw(r, "change") {
				case 0:
					v[f] = append(v[f], rapid.IntRange(0, 9).Draw(r, "x"))
				case 1:
					if len(v[f]) > 0 {
						v[f][0] = -1 // in place: the backing array is shared
					}
				case 2:
					delete(v, f)
				case 3:
					for k := range v {
						v[k] = v[k][:0]
					}
				}
			}
		}
		tx := db.NewTxn()
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			k := rapid.SampledFrom(keys).Draw(rt, "key")
			op := rapid.IntRange(0, 5).Draw(rt, "op")
			switch op {
			case 0, 1, 2: // Update that succeeds or fails after changing v in place
				fail := op == 2
				err := tab.Update(tx, 0, []byte(k), func(v *row, ok bool) error {
					if *v == nil {
						*v = row{}
					}
					mutate(*v, rt)
					if fail {
						return boom
					}
					view[k] = clone(*v)
					return nil
				})
				if fail != errors.Is(err, boom) || (!fail && err != nil) {
					rt.Fatalf("step %d: Update = %v, fail %v", step, err, fail)
				}
			case 3: // Read, change in place, give up: Revert
				v, _, err := tab.Read(tx, 0, []byte(k))
				if err != nil {
					rt.Fatal(err)
				}
				if v != nil {
					mutate(v, rt)
				}
				if err := tab.Revert(tx, 0, []byte(k)); err != nil {
					rt.Fatal(err)
				}
			case 4: // commit
				tx.SetCheckpoint("src", 0, uint64(step))
				if err := tx.Commit(ctx); err != nil {
					rt.Fatal(err)
				}
				for k, v := range view {
					committed[k] = v
				}
				tx = db.NewTxn()
			case 5: // discard
				tx.Discard()
				tx = db.NewTxn()
				view = map[string]row{}
				for k, v := range committed {
					view[k] = clone(v)
				}
			}
			if op >= 4 {
				for _, k := range keys {
					got, _, err := tab.Get(ctx, k)
					if err != nil {
						rt.Fatal(err)
					}
					if enc(got) != enc(committed[k]) {
						rt.Fatalf("step %d: Pebble holds %s for %s, want %s", step, enc(got), k, enc(committed[k]))
					}
				}
			}
			for _, k := range keys {
				got, _, err := tab.Read(tx, 0, []byte(k))
				if err != nil {
					rt.Fatal(err)
				}
				want, ok := view[k]
				if !ok {
					want = committed[k]
				}
				if enc(got) != enc(want) {
					rt.Fatalf("step %d: the Txn reads %s for %s, want %s", step, enc(got), k, enc(want))
				}
			}
		}
		tx.Discard()
	})
}
