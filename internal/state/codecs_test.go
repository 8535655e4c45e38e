package state

import (
	"bytes"
	stdjson "encoding/json"
	"reflect"
	"testing"
	"time"
)

type codecSample struct {
	Name  string             `json:"name,omitempty"`
	Tags  []string           `json:"tags"`
	Props map[string]int64   `json:"props"`
	When  time.Time          `json:"when"`
	Raw   stdjson.RawMessage `json:"raw"`
	Ptr   *account           `json:"ptr"`
	HTML  string             `json:"html"`
	F     float64            `json:"f"`
}

func TestJSONMatchesEncodingJSON(t *testing.T) {
	v := codecSample{
		Name: "n", Tags: []string{"a"}, Props: map[string]int64{"z": 1, "a": 2},
		When: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC), Raw: stdjson.RawMessage(`{"k":[1,2]}`),
		Ptr: &account{Owner: "o", Balance: -3}, HTML: "<a&b>", F: 0.1 + 0.2,
	}
	c := JSON[codecSample]()
	got, err := c.Append([]byte("prefix:"), v)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := stdjson.Marshal(v)
	if !bytes.Equal(got, append([]byte("prefix:"), want...)) {
		t.Fatalf("Append = %s\nencoding/json: %s", got, want)
	}

	// Decode must not keep the input: the bytes may be reused.
	in := append([]byte(nil), want...)
	dec, err := c.Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = ' '
	}
	var ref codecSample
	_ = stdjson.Unmarshal(want, &ref)
	if !reflect.DeepEqual(dec, ref) {
		t.Fatalf("Decode = %+v\nwant %+v", dec, ref)
	}

	for _, bad := range []string{`{"name":1}`, `{"name":"x"} trailing`, `{`, ``} {
		if _, err := c.Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) succeeded", bad)
		}
	}
}

func TestBytesAndStringCodecs(t *testing.T) {
	b := Bytes()
	enc, _ := b.Append([]byte{1}, []byte{2, 3})
	if !bytes.Equal(enc, []byte{1, 2, 3}) {
		t.Fatalf("Bytes.Append = %v", enc)
	}
	in := []byte{4, 5}
	out, _ := b.Decode(in)
	in[0] = 9
	if !bytes.Equal(out, []byte{4, 5}) {
		t.Fatalf("Bytes.Decode kept its input: %v", out)
	}
	if out, _ := b.Decode(nil); out == nil {
		t.Fatal("Bytes.Decode of no bytes returned nil, want an empty slice")
	}
	s := String()
	enc, _ = s.Append(nil, "héllo\xff")
	if got, _ := s.Decode(enc); got != "héllo\xff" {
		t.Fatalf("String round trip = %q", got)
	}
}

// FuzzJSONMatchesEncodingJSON decodes arbitrary input with JSON[T] and with
// encoding/json: both must accept or both refuse, and accepted values must
// encode to the same bytes.
func FuzzJSONMatchesEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"owner":"a","balance":1,"history":[1,2]}`))
	f.Add([]byte(`{"owner":`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"OWNER":"x","balance":1e2}`))
	f.Add([]byte(`{"owner":"\u00e9\ud800","history":null} `))
	c := JSON[account]()
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := c.Decode(data)
		var ref account
		stdErr := stdjson.Unmarshal(data, &ref)
		if (err == nil) != (stdErr == nil) {
			t.Fatalf("Decode(%q): err %v, encoding/json err %v", data, err, stdErr)
		}
		if err != nil {
			return
		}
		got, err := c.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := stdjson.Marshal(ref)
		if !bytes.Equal(got, want) {
			t.Fatalf("Decode(%q) then Append = %s; encoding/json gives %s", data, got, want)
		}
	})
}
