package jsoncmp_test

import (
	stdjson "encoding/json"
	"testing"

	"github.com/bytedance/sonic"
	gojson "github.com/goccy/go-json"
	jsoniter "github.com/json-iterator/go"
	segjson "github.com/segmentio/encoding/json"

	"github.com/strand-io/strand/stream"
)

// benchEvent is a small event: about 135 bytes as JSON.
type benchEvent struct {
	Account  uint64 `json:"account"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Memo     string `json:"memo"`
	At       int64  `json:"at"`
	Seq      uint32 `json:"seq"`
}

var benchPayload, _ = stdjson.Marshal(benchEvent{Account: 1234567, Amount: -4200, Currency: "EUR", Memo: "groceries at the corner shop", At: 1767225600000000, Seq: 77})

func benchDecode(b *testing.B, fn func([]byte, *benchEvent) error) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	for b.Loop() {
		var e benchEvent
		if err := fn(benchPayload, &e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONDecode compares the JSON libraries of go.mod on one small
// event; the fastest robust one is stream.JSON's implementation.
func BenchmarkJSONDecode(b *testing.B) {
	b.Run("encoding-json", func(b *testing.B) {
		benchDecode(b, func(d []byte, e *benchEvent) error { return stdjson.Unmarshal(d, e) })
	})
	b.Run("goccy-go-json", func(b *testing.B) {
		benchDecode(b, func(d []byte, e *benchEvent) error { return gojson.Unmarshal(d, e) })
	})
	b.Run("segmentio-encoding", func(b *testing.B) {
		benchDecode(b, func(d []byte, e *benchEvent) error { return segjson.Unmarshal(d, e) })
	})
	b.Run("sonic", func(b *testing.B) {
		benchDecode(b, func(d []byte, e *benchEvent) error { return sonic.Unmarshal(d, e) })
	})
	b.Run("jsoniter", func(b *testing.B) {
		cfg := jsoniter.ConfigCompatibleWithStandardLibrary
		benchDecode(b, func(d []byte, e *benchEvent) error { return cfg.Unmarshal(d, e) })
	})
	b.Run("stream.JSON", func(b *testing.B) {
		c := stream.JSON[benchEvent]()
		benchDecode(b, func(d []byte, e *benchEvent) error {
			v, err := c.Decode(d)
			*e = v
			return err
		})
	})
}

func BenchmarkJSONEncode(b *testing.B) {
	e := benchEvent{Account: 1234567, Amount: -4200, Currency: "EUR", Memo: "groceries at the corner shop", At: 1767225600000000, Seq: 77}
	run := func(b *testing.B, fn func([]byte, benchEvent) ([]byte, error)) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			var err error
			if buf, err = fn(buf[:0], e); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("encoding-json", func(b *testing.B) {
		run(b, func(dst []byte, e benchEvent) ([]byte, error) {
			out, err := stdjson.Marshal(e)
			return append(dst, out...), err
		})
	})
	b.Run("goccy-go-json", func(b *testing.B) {
		run(b, func(dst []byte, e benchEvent) ([]byte, error) {
			out, err := gojson.Marshal(e)
			return append(dst, out...), err
		})
	})
	b.Run("segmentio-encoding", func(b *testing.B) {
		run(b, func(dst []byte, e benchEvent) ([]byte, error) { return segjson.Append(dst, e, 0) })
	})
	b.Run("sonic", func(b *testing.B) {
		run(b, func(dst []byte, e benchEvent) ([]byte, error) {
			out, err := sonic.Marshal(e)
			return append(dst, out...), err
		})
	})
}
