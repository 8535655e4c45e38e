package deps

import (
	_ "github.com/apache/iggy/foreign/go/client"
	_ "github.com/apache/iggy/foreign/go/client/tcp"
	_ "github.com/apache/iggy/foreign/go/contracts"
	_ "github.com/apache/iggy/foreign/go/errors"
	_ "github.com/bytedance/sonic"
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/goccy/go-json"
	_ "github.com/hashicorp/go-multierror"
	_ "github.com/json-iterator/go"
	_ "github.com/segmentio/encoding/json"
	_ "github.com/zeebo/xxh3"
	_ "go.uber.org/goleak"
	_ "pgregory.net/rapid"
)
