package connector_test

import (
	"fmt"

	"github.com/strand-io/strand/algebra"
	"github.com/strand-io/strand/planner"
	"github.com/strand-io/strand/stream/connector"
)

// Example writes the strand headers of one event as a connector sends them
// (raw-valued user headers), reads them back as a source does, and picks the
// partition a publisher sends the key to.
func Example() {
	h := connector.Headers{Key: []byte("acct-7"), Tag: 2, Ordering: planner.Release, Algebra: algebra.Associative}
	fields, err := h.AppendFields(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	v := map[string][]byte{}
	for _, f := range fields {
		v[f.Name] = f.Value
	}
	back, err := connector.ParseHeaders(v[connector.HeaderKey], v[connector.HeaderType], v[connector.HeaderProps], v[connector.HeaderSeq])
	fmt.Printf("%d headers; read back: key %s, tag %d, %s, %s, %v\n", len(fields), back.Key, back.Tag, back.Ordering, back.Algebra, err)
	fmt.Println("partition of 8:", connector.PartitionOf(back.Key, 8))

	_, err = connector.ParseHeaders([]byte("acct-7"), nil, nil, nil)
	fmt.Println(err)
	// Output:
	// 3 headers; read back: key acct-7, tag 2, Release, Associative, <nil>
	// partition of 8: 2
	// strand: bad strand headers: strand-type header missing
}
