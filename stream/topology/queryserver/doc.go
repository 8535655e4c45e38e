// Package queryserver is a read-only HTTP query server over a running
// topology.App: JSON reads of the tables an application registers, the
// App's stats, and health and readiness answers. It writes nothing, ever.
//
//	srv, err := queryserver.New(app, queryserver.WithTable(balances))
//	go srv.ListenAndServe(ctx) // 127.0.0.1:8080 unless WithAddr says otherwise
//
// or mount it on a server of one's own: a *Server is an http.Handler.
//
// # Endpoints
//
//	GET /tables/{table}/{key}  the key's committed value as JSON; 404 only when the row does not exist;
//	                           ?wait=1: one that holds every commit returned before the request
//	GET /tables/{table}        a page of rows: ?limit=N&prefix=P&after=CURSOR → {"rows":[{"key","partition","value"}],"next"}
//	GET /tables                the registered tables and their partition counts
//	GET /stats                 App.Stats as JSON
//	GET /healthz               200 while the process answers
//	GET /readyz                200 once the App has caught up with its sources, 503 with the reason before
//
// HEAD is answered like GET; every other method is refused with 405, and
// every error is a JSON object {"error": "..."}: 400 for a key or a
// parameter that cannot be read (naming what was wrong), 404 for an unknown
// table or endpoint, 503 for a retryable unavailability (with Retry-After),
// 502 when the owner of a key did not answer, 508 for a forwarding loop.
//
// # Keys
//
// A key travels in the URL as its string form: the string itself for keys
// of a string kind, the decimal number for signed and unsigned integer
// kinds (these are parsed and formatted by default), and whatever a
// WithKeyParser and WithKeyFormatter say for any other key type. Scan rows carry the
// same string form. A key is escaped like any path segment; it may contain
// slashes.
//
// # Scans
//
// A scan reads the partitions this instance serves (see Router) in
// partition order, and each partition in the order of its key bytes (for
// integer keys, numeric order). prefix keeps the rows whose key string form
// starts with it; it filters the rows read, it does not seek, so a page
// reads at most WithScanBudget rows and may come back short, or empty, with
// a next cursor: a client follows next until a page has none. A cursor
// names the last row read (its partition and key bytes), so following it
// resumes exactly after that row, whatever was committed in between: no
// row present through the whole scan is missed or repeated. limit defaults
// to 100 and is refused above WithMaxLimit (default 10,000).
//
// # Scale-out
//
// Several Apps can share the partitions of a topology's sources, each with
// its own query server. A Router says for each table partition whether
// this instance serves it, another one owns it (at which query address),
// or it is unavailable for now (its state is restoring, say).
//
// The default router follows the App. An App of a group
// (topology.WithGroup, announcing its query server's address with
// topology.WithQueryAddr) is routed by the group's membership, which every
// member reads from the broker: a partition the App serves
// (App.Phase(p) == topology.Serving) while the membership still grants it
// to this member (Membership.Owns) is local; one it is restoring is
// unavailable ("partition N is restoring"); one another member owns is
// remote, at the address that member announced; and a partition without an
// owner, or whose owner announced no address, is unavailable. Table
// partition p is source partition p: a table has as many partitions as the
// sources it is projected from. An App opened with static
// topology.WithPartitions serves the partitions it processes and answers
// 503 for the others (their rows are in no store here), unless
// StaticRouter (a fixed partition → owner map) or another WithRouter says
// where they are.
//
// A get of a key owned elsewhere is forwarded to the owner once (the
// forwarded request carries the Strand-Forwarded header; an owner that
// would forward it again answers 508, which happens only while the
// instances' views of the membership disagree), or redirected to it with
// WithRedirect. A key's partition is connector.PartitionOf(its key bytes, the
// table's partition count), where strand's publishers put its events.
// Scans read only the partitions served locally and list the others in
// "skipped". Every unavailable answer is a 503 with Retry-After: a client
// retries it, and is never told 404 for a key that exists elsewhere.
//
// # Binding
//
// ListenAndServe binds to a loopback address (default 127.0.0.1:8080) and
// refuses any other unless WithNonLoopback is given: the server has no
// authentication of its own.
//
// # Options
//
// Option and TableOption are opaque interfaces made only by this package's
// With… functions (WithAddr, WithTable, WithKeyParser, …); New refuses a
// bad value with an error naming the option.
package queryserver
