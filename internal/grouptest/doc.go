// Package grouptest holds the scale-out (group) tests of the topology
// builder's front door, and the fixtures stream/topology's tests share
// with them: Apps of one topology in a group over an embedded Iggy broker,
// sharing its partitions and handing them over as instances join, leave,
// are deposed or are killed, checked key by key on the instance that
// serves each partition.
//
// The tests are its _test.go files: partitions shared and moved, and a
// deposed owner fenced (group_test.go), reads that never go back across a
// failover (group_reads_test.go), Stats of the served partitions only
// (group_stats_test.go), global tables in a group and across kills of a
// child process (global_group_test.go, global_crash_test.go), standby
// copies promoted and read (standby_test.go, standby_fresh_test.go), and
// deletes, timers and windows carried across hand-overs
// (time_group_test.go, window_group_test.go). They drive the public front
// door only (stream/topology, the Iggy connector and its embedded broker,
// crashtest), as a user's tests would.
//
// They live here rather than beside stream/topology's other tests so that
// `go test ./...` builds and runs them in a test binary of their own,
// early among the suite's packages and beside the others, instead of at
// the end in the largest one, where they were most of the suite's tail
// (docs/design.md §17; go test starts test binaries in package order):
// they wait on session timeouts, hand-overs and child processes more than
// on the CPU. Those of a second or more run in parallel (t.Parallel), as
// they did in stream/topology (its parallel_test.go says why): each has its
// own broker, directories and declarations, and none asserts anything
// about time. The crash test's child (TestGlobalGroupCrashChild) is this
// package's test binary, started again by crashtest.
//
// The non-test files are the fixtures: the counter's event Ev and topology
// (Counter), an embedded broker (Broker), the global tables' events
// (RateSet, Payment), a crash child's ready line (CrashReady), metric sums
// (Sums), the time tests' event, row and clock (TPEv, TVal, TBase), and the
// window tests' event, topology and reference (WEv, WAgg, WTopology,
// WindowReference) with their set-up over Iggy (WindowBroker,
// PublishWindows, CheckFinalsOnce). Only tests import this package.
package grouptest
