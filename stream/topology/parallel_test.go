package topology_test

// Which tests of this package run in parallel (t.Parallel), and why.
//
// The package is one of the two heaviest of the newcomer's suite (issue 33
// item 7: `go test -race ./...` within 8 minutes on a 2-core machine). Its
// time goes to a handful of tests, each of which shares nothing with the
// others (own temporary directories, own in-memory brokers or embedded Iggy
// servers on port 0, read-only event declarations) and none of which
// asserts anything about time:
//
//   - the crash tests (TestCrashResumesExactly, TestSubmitCrashResumesExactly,
//     TestReseqCrashHoldsAndTablesExact) wait on child processes and kill
//     windows, not on the CPU; their windows adapt to the child's progress,
//     so a slower machine changes where kills land, never the verdict (the
//     data check against the sequential fold);
//   - the property tests (TestProperty*: the driver, rapid; most of them are
//     in internal/proptest since round 4, a test binary of their own that
//     runs early in the suite) spend much of their time opening and closing
//     Pebble stores (restarts) and waiting for the App's pipelines, so two of
//     them overlap well on two cores;
//   - the other tests of a second or more (the windows', timers' and
//     builds' crash tests; TestFullDiskStopsTheAppNotTheProcess, a child
//     process; TestTableFedByTwoSources, TestResetPublishesNothingTwice and
//     TestSubmitStopsAfterFailedCommit) run in parallel too since round 4:
//     the package's run is the last of a cold suite (go test starts test
//     binaries in package order) and ran one at a time then, 125 s on a
//     2-core machine against 104 s in parallel.
//
// The group (scale-out) tests, whose instances wait on session timeouts
// and hand-overs (TestGlobalTablesInAGroupAcrossKills, a crash test,
// among them), ran in parallel here too; they are in internal/grouptest
// now, a test binary of their own that runs early in the suite, and run
// in parallel there for the same reasons.
//
// Go runs the parallel tests after every sequential test of the package has
// finished, so they never overlap a test that measures time. Every test
// keeps its number of rapid cases (internal/testrun: 50, 500 with
// STRAND_SOAK=1). The heaviest ones are shorter in the default run than
// in a soak (issue 33 item 7): the property tests draw logs of half the
// length (soakLen), and the crash tests kill fewer times (crashtest.Kills:
// TestCrashResumesExactly and TestReseqCrashHoldsAndTablesExact 5, 200 in a
// soak; TestSubmitCrashResumesExactly 8, 100 in a soak).
