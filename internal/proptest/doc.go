// Package proptest holds the generative property tests of the topology
// builder's shapes, and the fixtures stream/topology's tests share with
// them: random logs, batchings, partition counts, handler failures and
// restarts, checked against the one-event-at-a-time fold of the same log
// (the sequential reference).
//
// The tests are its _test.go files: tables equal the sequential fold
// (property_test.go), failures leave no trace (failure_property_test.go),
// re-sequenced tables equal the sequence-order fold
// (resequence_property_test.go), foreign tables, KeyBy and To, joins and
// lookups (foreign_test.go, keyby_test.go, join_test.go, lookup_test.go), and
// Build's refusals of the shapes it does not run (refusal_test.go). They
// drive the public front door only (stream/topology and its topologytest
// driver), as a user's tests would.
//
// They live here rather than beside stream/topology's other tests so that
// `go test ./...` builds and runs them in a test binary of their own, early
// among the suite's packages and beside the others, instead of at the end in
// the largest one (issue 33 item 7: the newcomer's suite within 8 minutes on
// a 2-core machine; go test starts test binaries in package order). The
// non-test files are the fixtures: the event types PEv and SEv, the states
// PState and MState, their declarations and folds (PTypes, STypes), the
// topologies (PropertyTopology, ReseqTopology), a failing fold (Flaky), the
// shop workload of the KeyBy tests, and SoakLen. Only tests import this
// package.
package proptest
