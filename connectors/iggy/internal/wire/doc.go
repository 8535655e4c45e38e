// Package wire is the one definition of the Iggy binary protocol layouts
// that strand speaks, shared by the connector (connectors/iggy) and the
// embedded broker (connectors/iggy/iggytest), in the manner of franz-go's
// kmsg: frames, request and reply bodies, status codes and the message
// layouts of both protocols.
//
// Two protocols are defined:
//
//   - Legacy: Iggy server 0.7/0.8 ("legacy framing"): a request is
//     [length u32][code u32][payload], a reply [status u32][length u32]
//     [payload]; messages travel with 64-byte headers behind an index.
//   - V012: binary protocol 0.12.0, spoken by Iggy server 0.10: every frame
//     is a 256-byte header plus a body, login registers a session, and
//     messages travel as one batch (256-byte batch header, 48-byte frame
//     headers) sealed by XXH3-64 checksums.
//
// All integers are little-endian. Every decoder here takes untrusted bytes:
// it returns an error for anything that does not parse and never panics
// (each has a fuzz target). Encoders append to a caller's buffer so that
// hot paths can reuse it.
//
// Where the published 0.10 sources leave a layout open, the choice made
// here is stated at the definition and in docs/design.md §7.
package wire
