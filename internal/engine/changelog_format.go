package engine

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
	"github.com/strand-io/strand/stream/connector"
)

// ErrFenced means a partition is owned by another instance now (a higher
// epoch fenced this one): nothing this instance commits or publishes for
// it counts any more.
var ErrFenced = errors.New("stream: partition fenced: another instance owns it now")

// ErrBadChangelog is wrapped by errors about a changelog record that does
// not decode.
var ErrBadChangelog = errors.New("stream: bad changelog record")

// ClogKind is the kind of a changelog record.
type ClogKind uint8

const (
	// ClogFence: a new owner takes the partition over with its epoch.
	ClogFence ClogKind = iota + 1
	// ClogCommit: one commit of the partition (its writes).
	ClogCommit
	// ClogSnapshotChunk: part of a snapshot of the partition's rows.
	ClogSnapshotChunk
	// ClogSnapshotEnd: a snapshot is complete.
	ClogSnapshotEnd
)

func (k ClogKind) String() string {
	switch k {
	case ClogFence:
		return "fence"
	case ClogCommit:
		return "commit"
	case ClogSnapshotChunk:
		return "snapshot-chunk"
	case ClogSnapshotEnd:
		return "snapshot-end"
	}
	return fmt.Sprintf("ClogKind(%d)", uint8(k))
}

// clogMagic starts every changelog record's payload.
const clogMagic = "SCL1"

// ClogRange is the offsets [From, Next) of one source a commit covers.
type ClogRange struct {
	Source string `json:"src"`
	From   uint64 `json:"from"`
	Next   uint64 `json:"next"`
}

// ClogMeta is what a changelog record says about itself (JSON in the
// payload). For a commit it is also the partition's head row in the
// store: the last commit the store reflects.
type ClogMeta struct {
	Epoch  connector.Epoch    `json:"e"`
	Member connector.MemberID `json:"m"`
	Seq    uint64             `json:"s,omitempty"` // commit: its number; snapshot end: the last commit it holds
	Ranges []ClogRange        `json:"r,omitempty"` // commit
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

// ClogRecord is one decoded changelog record.
type ClogRecord struct {
	Kind   ClogKind
	Meta   ClogMeta
	Writes []byte // commit and chunk: the rows (state batch representation)
}

// appendClog appends the payload of a record: magic, kind, uvarint length
// of the meta JSON, the JSON, then writes.
func appendClog(dst []byte, k ClogKind, meta []byte, writes []byte) []byte {
	dst = append(dst, clogMagic...)
	dst = append(dst, byte(k))
	dst = binary.AppendUvarint(dst, uint64(len(meta)))
	dst = append(dst, meta...)
	return append(dst, writes...)
}

func encodeClog(k ClogKind, m *ClogMeta, writes []byte) ([]byte, error) {
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
	return appendClog(make([]byte, 0, len(clogMagic)+1+binary.MaxVarintLen32+len(row)), ClogCommit, head, writes), nil
}

// DecodeClog decodes a changelog record's payload. Writes aliases payload.
func DecodeClog(payload []byte) (ClogRecord, error) {
	var r ClogRecord
	if len(payload) < len(clogMagic)+2 || string(payload[:len(clogMagic)]) != clogMagic {
		return r, fmt.Errorf("%w: no %q magic", ErrBadChangelog, clogMagic)
	}
	r.Kind = ClogKind(payload[len(clogMagic)])
	if r.Kind < ClogFence || r.Kind > ClogSnapshotEnd {
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
func parseHead(head []byte) (ClogMeta, error) {
	var m ClogMeta
	if err := json.Unmarshal(head, &m); err != nil {
		return m, fmt.Errorf("%w: head: %w", ErrBadChangelog, err)
	}
	return m, nil
}

// ClogHistory applies the rules every reader of a changelog partition
// follows, record by record in log order, and says what each commit is:
// a Fence raises the current epoch; a commit of a lower epoch is fenced (a
// deposed owner's late work); a commit of the current epoch that repeats a
// number already seen is a duplicate; the next number is valid; anything
// else (a gap, an epoch above the current one without its fence) means
// the reader did not start where it should.
type ClogHistory struct {
	Epoch connector.Epoch // the current epoch
	Last  uint64          // the last valid commit's number (0: none)
}

// ClogVerdict is what ClogHistory.Next says about a record.
type ClogVerdict uint8

const (
	// ClogValid: a commit of the valid history (or a fence that raised the epoch).
	ClogValid ClogVerdict = iota + 1
	// ClogFenced: a commit below the current epoch.
	ClogFenced
	// ClogDuplicate: a commit already seen (a resend).
	ClogDuplicate
	// ClogInconsistent: a gap, or an epoch without its fence.
	ClogInconsistent
	// ClogOther: a record that is not a commit and changed nothing.
	ClogOther
)

func (v ClogVerdict) String() string {
	switch v {
	case ClogValid:
		return "valid"
	case ClogFenced:
		return "fenced"
	case ClogDuplicate:
		return "duplicate"
	case ClogInconsistent:
		return "inconsistent"
	case ClogOther:
		return "other"
	}
	return fmt.Sprintf("ClogVerdict(%d)", uint8(v))
}

// Next classifies r and advances the history.
func (h *ClogHistory) Next(r *ClogRecord) ClogVerdict {
	switch r.Kind {
	case ClogFence:
		if r.Meta.Epoch > h.Epoch {
			h.Epoch = r.Meta.Epoch
			return ClogValid
		}
		return ClogOther
	case ClogCommit:
		switch {
		case r.Meta.Epoch < h.Epoch:
			return ClogFenced
		case r.Meta.Epoch > h.Epoch:
			return ClogInconsistent
		case r.Meta.Seq <= h.Last:
			return ClogDuplicate
		case r.Meta.Seq != h.Last+1:
			return ClogInconsistent
		}
		h.Last = r.Meta.Seq
		return ClogValid
	}
	return ClogOther
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
