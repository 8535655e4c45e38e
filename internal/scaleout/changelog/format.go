package changelog

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/strand-io/strand/internal/state"
	"github.com/strand-io/strand/stream"
	"github.com/strand-io/strand/stream/connector"
)

// ErrBadChangelog is wrapped by errors about a changelog record that does
// not decode.
var ErrBadChangelog = errors.New("strand: bad changelog record")

// Kind is the kind of a changelog record: stream.ChangelogKind, defined
// there once (docs/design.md §1).
type Kind = stream.ChangelogKind

const (
	// KindFence: a new owner takes the partition over with its epoch.
	KindFence = stream.ChangelogFence
	// KindCommit: one commit of the partition (its writes).
	KindCommit = stream.ChangelogCommit
	// KindSnapshotChunk: part of a snapshot of the partition's rows.
	KindSnapshotChunk = stream.ChangelogSnapshot
	// KindSnapshotEnd: a snapshot is complete.
	KindSnapshotEnd = stream.ChangelogSnapshotEnd
)

// clogMagic starts every changelog record's payload.
const clogMagic = "SCL1"

// Range is the offsets [From, Next) of one source a commit covers.
type Range struct {
	Source string `json:"src"`
	From   uint64 `json:"from"`
	Next   uint64 `json:"next"`
}

// Meta is what a changelog record says about itself (JSON in the
// payload). For a commit it is also the partition's head row in the
// store: the last commit the store reflects.
type Meta struct {
	Epoch  connector.Epoch    `json:"e"`
	Member connector.MemberID `json:"m"`
	Seq    uint64             `json:"s,omitempty"` // commit: its number; snapshot end: the last commit it holds
	Ranges []Range            `json:"r,omitempty"` // commit
	// Tables is a digest of the writer's table ids (fence, commit, chunk):
	// rows carry them, so a store applies rows only from a writer that
	// numbers its tables alike.
	Tables uint32 `json:"t,omitempty"`
	// Snapshot records.
	Snapshot uint64 `json:"snap,omitempty"`   // the snapshot's id
	Index    uint32 `json:"i,omitempty"`      // chunk: its index
	Chunks   uint32 `json:"n,omitempty"`      // end: the chunk count
	Resume   uint64 `json:"resume,omitempty"` // end: offset of commit Seq, where a reader goes on after the snapshot
}

// Record is one decoded changelog record.
type Record struct {
	Kind   Kind
	Meta   Meta
	Writes []byte // commit and chunk: the rows (state batch representation)
}

// appendClog appends the payload of a record: magic, kind, uvarint length
// of the meta JSON, the JSON, then writes.
func appendClog(dst []byte, k Kind, meta []byte, writes []byte) []byte {
	dst = append(dst, clogMagic...)
	dst = append(dst, byte(k))
	dst = binary.AppendUvarint(dst, uint64(len(meta)))
	dst = append(dst, meta...)
	return append(dst, writes...)
}

func encodeClog(k Kind, m *Meta, writes []byte) ([]byte, error) {
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return appendClog(make([]byte, 0, len(clogMagic)+1+binary.MaxVarintLen32+len(meta)+len(writes)), k, meta, writes), nil
}

// commitPayload turns a FamilyChangelog row (state.EncodeLogged(head,
// writes), head being the commit's meta JSON) into its record's payload.
func commitPayload(row []byte) ([]byte, error) {
	head, writes, err := state.DecodeLogged(row)
	if err != nil {
		return nil, err
	}
	return appendClog(make([]byte, 0, len(clogMagic)+1+binary.MaxVarintLen32+len(row)), KindCommit, head, writes), nil
}

// Decode decodes a changelog record's payload. Writes aliases payload.
func Decode(payload []byte) (Record, error) {
	var r Record
	if len(payload) < len(clogMagic)+2 || string(payload[:len(clogMagic)]) != clogMagic {
		return r, fmt.Errorf("%w: no %q magic", ErrBadChangelog, clogMagic)
	}
	r.Kind = Kind(payload[len(clogMagic)])
	if r.Kind < KindFence || r.Kind > KindSnapshotEnd {
		return r, fmt.Errorf("%w: unknown kind %d", ErrBadChangelog, r.Kind)
	}
	rest := payload[len(clogMagic)+1:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || n > uint64(len(rest)-w) {
		return r, fmt.Errorf("%w: bad meta length", ErrBadChangelog)
	}
	if err := json.Unmarshal(rest[w:w+int(n)], &r.Meta); err != nil {
		return r, fmt.Errorf("%w: meta: %w", ErrBadChangelog, err)
	}
	r.Writes = rest[w+int(n):]
	return r, nil
}

// parseHead decodes a head row (a commit's meta JSON).
func parseHead(head []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(head, &m); err != nil {
		return m, fmt.Errorf("%w: head: %w", ErrBadChangelog, err)
	}
	return m, nil
}

// History applies the rules every reader of a changelog partition
// follows, record by record in log order, and says what each commit is:
// a Fence raises the current epoch; a commit of a lower epoch is fenced (a
// deposed owner's late work); a commit of the current epoch that repeats a
// number already seen is a duplicate; the next number is valid; anything
// else (a gap, an epoch above the current one without its fence) means
// the reader did not start where it should.
type History struct {
	Epoch connector.Epoch // the current epoch
	Last  uint64          // the last valid commit's number (0: none)
}

// Verdict is what History.Next says about a record.
type Verdict = stream.ChangelogVerdict

const (
	// Valid: a commit of the valid history (or a fence that raised the epoch).
	Valid = stream.ChangelogValid
	// Fenced: a commit below the current epoch.
	Fenced = stream.ChangelogFenced
	// Duplicate: a commit already seen (a resend).
	Duplicate = stream.ChangelogDuplicate
	// Inconsistent: a gap, or an epoch without its fence.
	Inconsistent = stream.ChangelogInconsistent
	// Other: a record that is not a commit and changed nothing.
	Other = stream.ChangelogOther
)

// Next classifies r and advances the history.
func (h *History) Next(r *Record) Verdict {
	switch r.Kind {
	case KindFence:
		if r.Meta.Epoch > h.Epoch {
			h.Epoch = r.Meta.Epoch
			return Valid
		}
		return Other
	case KindCommit:
		switch {
		case r.Meta.Epoch < h.Epoch:
			return Fenced
		case r.Meta.Epoch > h.Epoch:
			return Inconsistent
		case r.Meta.Seq <= h.Last:
			return Duplicate
		case r.Meta.Seq != h.Last+1:
			return Inconsistent
		}
		h.Last = r.Meta.Seq
		return Valid
	}
	return Other
}

// tablesDigest digests a store's table ids (state.DB.TableIDs).
func tablesDigest(ids map[string]uint32) uint32 {
	h := fnv.New32a()
	for _, name := range slices.SortedFunc(maps.Keys(ids), cmp.Compare[string]) {
		h.Write([]byte(name))
		h.Write(binary.BigEndian.AppendUint32([]byte{0}, ids[name]))
	}
	return max(h.Sum32(), 1)
}
