// Package jsoncmp holds the benchmark that chose stream.JSON's libraries
// (goccy/go-json to decode, segmentio/encoding to encode) against
// encoding/json, sonic and jsoniter. It is a module of its own, so that
// the libraries it compares stay out of strand's module graph:
//
//	cd benchmarks/jsoncmp && go test -run '^$' -bench JSON
package jsoncmp
