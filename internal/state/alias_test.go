package state

import (
	"reflect"
	"testing"
	"time"
)

type selfRef struct {
	Next *selfRef
	N    int
}

func TestAliasFree(t *testing.T) {
	type flat struct {
		A int64
		S string
		B [4]byte
		C struct{ X, Y float64 }
	}
	cases := []struct {
		typ  reflect.Type
		want bool
	}{
		{reflect.TypeFor[int64](), true},
		{reflect.TypeFor[string](), true},
		{reflect.TypeFor[flat](), true},
		{reflect.TypeFor[account](), false}, // History []int64
		{reflect.TypeFor[[]byte](), false},
		{reflect.TypeFor[map[string]int](), false},
		{reflect.TypeFor[*flat](), false},
		{reflect.TypeFor[any](), false},
		{reflect.TypeFor[[2][]int](), false},
		{reflect.TypeFor[selfRef](), false},
		{reflect.TypeFor[time.Time](), false}, // holds a *Location
	}
	for _, c := range cases {
		if got := aliasFree(c.typ); got != c.want {
			t.Errorf("aliasFree(%v) = %v, want %v", c.typ, got, c.want)
		}
	}
}
