// Package runhooks lets strand's own crash tests reach the engine's hooks
// (kill points inside commits and dead-letter publication) through the
// public front door: topology's Open appends the processor options carried
// by its context. Nothing outside this module can import it.
package runhooks

import (
	"context"

	"github.com/strand-io/strand/internal/engine"
)

type key struct{}

// With returns ctx carrying opts for every processor an App opened with it
// runs.
func With(ctx context.Context, opts ...engine.ProcessorOption) context.Context {
	return context.WithValue(ctx, key{}, append(From(ctx), opts...))
}

// From returns the processor options ctx carries.
func From(ctx context.Context) []engine.ProcessorOption {
	opts, _ := ctx.Value(key{}).([]engine.ProcessorOption)
	return opts
}
