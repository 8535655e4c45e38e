// Package rows is the one place that lays out the rows the runtime keeps in
// its store besides the tables' own (in the way of pebble's batchrepr):
// every key builder and value codec of the row families below, and the one
// Reader that decodes them. internal/state owns the first bytes of every
// Pebble key (family, partition); rows owns the rest (docs/design.md §6).
//
//	family              key (after family and partition)          value                       file
//	FamilyOutbox        AppendString(source) 0x00 seq(u64 BE)     a run of messages           outbox.go
//	                    AppendString(source) 0x01                 next seq (u64 BE)           outbox.go
//	FamilyOrigins       AppendString(source) origin stream(8)     highest seq applied         outbox.go
//	                    AppendString(source) replay origin(16)    unix ns of the commit       origin.go
//	FamilyDeadLetters   AppendString(source) offset(u64 BE)       AppendLetter                parked.go, record.go
//	                    … offset 'T' table at key (a timer's)     AppendLetter                timer_letters.go
//	                    … offset 'W' table start end key (a window's) AppendLetter            timer_letters.go
//	FamilyParked        AppendString(source) 'k' AppendString(key) ParkedMeta                 parked.go
//	                    AppendString(source) 'r' AppendString(key) offset   AppendRecord      parked.go
//	FamilyHolds         AppendString(source) AppendString(key) seq AppendHold                 sequences.go
//	FamilySequences     AppendString(source) 'n'|'g'|'d' ...      next, gap notice, delta     sequences.go
//	FamilyTimers        kind AppendString(table) 0x00 at key      empty (the index)           deadlines.go
//	                    kind AppendString(table) 0x01 key         at (u64 BE)                 deadlines.go
//
// The changelog's rows (FamilyChangelog, FamilyLogHead) are internal/state's
// and the payloads it publishes internal/scaleout/changelog's.
//
// Strings and byte strings are uvarint-prefixed (AppendString, AppendBytes),
// integers big-endian. A Reader's first problem sticks in Err (ErrShort when
// a row ends too early), so a decoder reads every field and checks once.
// Every decoder refuses a bad row with an error and never panics; row
// versions written by older releases are still read.
//
// rows depends on the public packages (stream, connector, deadletter,
// planner, algebra) and internal/xxh32 only: the engine, the scale-out and
// the CLI all build on it.
package rows
