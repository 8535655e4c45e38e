package state

import "reflect"

// aliasFree reports whether values of type t can never share memory with a
// copy of themselves: no pointers, maps, slices, interfaces, channels or
// functions anywhere inside (strings are immutable, so they are fine). A
// value of such a type that [Table.Read] returns is the caller's own copy,
// so changing it cannot change the cached value; the value cache then need
// not drop the keys a transaction only read. It runs once per table
// declaration, never per event.
func aliasFree(t reflect.Type) bool {
	return aliasFreeSeen(t, map[reflect.Type]bool{})
}

func aliasFreeSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == nil {
		return false
	}
	if ok, done := seen[t]; done {
		return ok
	}
	seen[t] = false // a type that contains itself needs a pointer somewhere
	ok := false
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		ok = true
	case reflect.Array:
		ok = aliasFreeSeen(t.Elem(), seen)
	case reflect.Struct:
		ok = true
		for i := range t.NumField() {
			if !aliasFreeSeen(t.Field(i).Type, seen) {
				ok = false
				break
			}
		}
	}
	seen[t] = ok
	return ok
}
