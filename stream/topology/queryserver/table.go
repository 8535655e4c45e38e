package queryserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/strand-io/strand/internal/strerr"
	"github.com/strand-io/strand/stream/connector"
	"github.com/strand-io/strand/stream/topology"
)

// TableOption configures how a table with keys of type K is served (Table).
type TableOption[K any] interface {
	apply(*tableOptions[K]) error
}

// tableOptionFunc adapts a function to TableOption.
type tableOptionFunc[K any] func(*tableOptions[K]) error

func (f tableOptionFunc[K]) apply(c *tableOptions[K]) error { return f(c) }

type tableOptions[K any] struct {
	parse  func(string) (K, error)
	format func(K) string
}

// WithKeyParser sets how the string form of a key in a URL becomes a key; an
// error is answered 400 with its text. It is needed for key types of a kind
// other than string and signed or unsigned integers.
func WithKeyParser[K any](parse func(string) (K, error)) TableOption[K] {
	return tableOptionFunc[K](func(o *tableOptions[K]) error {
		if parse == nil {
			return errors.New("strand: queryserver.WithKeyParser: nil function")
		}
		o.parse = parse
		return nil
	})
}

// WithKeyFormatter sets the string form of a key in scan rows, which prefix
// matches; it should be what WithKeyParser reads. The default is the string
// itself or the decimal number for string and integer kinds, fmt.Sprint
// for others.
func WithKeyFormatter[K any](format func(K) string) TableOption[K] {
	return tableOptionFunc[K](func(o *tableOptions[K]) error {
		if format == nil {
			return errors.New("strand: queryserver.WithKeyFormatter: nil function")
		}
		o.format = format
		return nil
	})
}

// WithTable registers tbl with the server, under its name: gets and scans of
// /tables/{name}. Values are encoded with encoding/json (a value type can
// implement json.Marshaler). Keys of string and integer kinds are read and
// written as strings and decimal numbers; other key types need a
// WithKeyParser, or New refuses the table.
func WithTable[K, V any](tbl *topology.Table[K, V], opts ...TableOption[K]) Option {
	return optionFunc(func(c *config) error {
		if tbl == nil {
			return errors.New("strand: queryserver.WithTable: nil table")
		}
		var o tableOptions[K]
		for _, opt := range opts {
			if opt == nil {
				continue
			}
			if err := opt.apply(&o); err != nil {
				return strerr.Errorf("strand: queryserver.WithTable %q: %w", tbl.Name(), err)
			}
		}
		kt := reflect.TypeFor[K]()
		if o.parse == nil {
			p, err := defaultParse[K](kt)
			if err != nil {
				return strerr.Errorf("strand: queryserver.WithTable %q: %w", tbl.Name(), err)
			}
			o.parse = p
		}
		if o.format == nil {
			o.format = defaultFormat[K](kt)
		}
		c.tables = append(c.tables, &served[K, V]{tbl: tbl, name: tbl.Name(), keyType: kt.String(), parse: o.parse, format: o.format})
		return nil
	})
}

// table is a registered table, whatever its key and value types.
type table interface {
	info() tableInfo
	partitions() uint32
	// locate parses a key's string form into a located key.
	locate(s string) (located, error)
	// get returns the JSON of the key's committed value and how fresh it
	// is; wait: from every commit that returned before the call
	// (Table.GetFresh), else without waiting (Table.GetRecent).
	get(ctx context.Context, l located, wait bool) ([]byte, bool, topology.Freshness, error)
	// scanPartition calls fn with the rows of a partition after the key
	// bytes after; fn's key bytes are valid only during the call. It
	// returns how fresh the rows are.
	scanPartition(ctx context.Context, p uint32, after []byte, fn func(kb []byte, key string, value json.RawMessage) bool) (topology.Freshness, error)
}

type tableInfo struct {
	Name       string `json:"name"`
	KeyType    string `json:"key_type"`
	Partitions uint32 `json:"partitions"`
}

// located is a parsed key: its value (in the table's type) and its bytes.
type located struct {
	key   any
	bytes []byte
}

type served[K, V any] struct {
	tbl     *topology.Table[K, V]
	name    string
	keyType string
	parse   func(string) (K, error)
	format  func(K) string
}

func (s *served[K, V]) info() tableInfo {
	return tableInfo{Name: s.name, KeyType: s.keyType, Partitions: s.tbl.Partitions()}
}

func (s *served[K, V]) partitions() uint32 { return s.tbl.Partitions() }

func (s *served[K, V]) locate(str string) (located, error) {
	k, err := s.parse(str)
	if err != nil {
		return located{}, fmt.Errorf("table %q: bad key %q: %w", s.name, str, err)
	}
	kb, err := s.tbl.AppendKey(nil, k)
	if err != nil {
		return located{}, fmt.Errorf("table %q: bad key %q: %w", s.name, str, err)
	}
	return located{key: k, bytes: kb}, nil
}

func (s *served[K, V]) get(ctx context.Context, l located, wait bool) ([]byte, bool, topology.Freshness, error) {
	get := s.tbl.GetRecent
	if wait {
		get = s.tbl.GetFresh
	}
	v, ok, fr, err := get(ctx, l.key.(K))
	if err != nil || !ok {
		return nil, ok, fr, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false, fr, fmt.Errorf("table %q: encode the value as JSON: %w", s.name, err)
	}
	return b, true, fr, nil
}

func (s *served[K, V]) scanPartition(ctx context.Context, p uint32, after []byte, fn func([]byte, string, json.RawMessage) bool) (topology.Freshness, error) {
	var encErr error
	fr, err := s.tbl.ScanPartitionRecent(ctx, p, after, func(kb []byte, k K, v V) bool {
		b, err := json.Marshal(v)
		if err != nil {
			encErr = fmt.Errorf("table %q: encode the value of key %q as JSON: %w", s.name, s.format(k), err)
			return false
		}
		return fn(kb, s.format(k), b)
	})
	if err == nil {
		err = encErr
	}
	return fr, err
}

// defaultParse reads keys of string and integer kinds.
func defaultParse[K any](t reflect.Type) (func(string) (K, error), error) {
	switch t.Kind() {
	case reflect.String:
		return func(s string) (K, error) {
			var k K
			reflect.ValueOf(&k).Elem().SetString(s)
			return k, nil
		}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return func(s string) (K, error) {
			var k K
			n, err := strconv.ParseInt(s, 10, bits)
			if err != nil {
				return k, fmt.Errorf("want a signed integer (%s, %d..%d)", t, int64(-1)<<(bits-1), int64(1)<<(bits-1)-1)
			}
			reflect.ValueOf(&k).Elem().SetInt(n)
			return k, nil
		}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := t.Bits()
		return func(s string) (K, error) {
			var k K
			n, err := strconv.ParseUint(s, 10, bits)
			if err != nil {
				return k, fmt.Errorf("want an unsigned integer (%s, 0..%d)", t, uint64(math.MaxUint64)>>(64-bits))
			}
			reflect.ValueOf(&k).Elem().SetUint(n)
			return k, nil
		}, nil
	}
	return nil, fmt.Errorf("key type %s is not a string or an integer: give a queryserver.WithKeyParser", t)
}

// defaultFormat writes keys of string and integer kinds as defaultParse
// reads them, others with fmt.Sprint.
func defaultFormat[K any](t reflect.Type) func(K) string {
	switch t.Kind() {
	case reflect.String:
		return func(k K) string { return reflect.ValueOf(k).String() }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(k K) string { return strconv.FormatInt(reflect.ValueOf(k).Int(), 10) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return func(k K) string { return strconv.FormatUint(reflect.ValueOf(k).Uint(), 10) }
	}
	return func(k K) string { return fmt.Sprint(k) }
}

// partitionOf is where the rows of key bytes kb are filed.
func partitionOf(kb []byte, n uint32) uint32 { return connector.PartitionOf(kb, n) }
