package wire

import "fmt"

// Option is one entry of a V012 options block: a string key and a typed
// value (the user-header kinds: 2 String, 3 Bool, 11 Uint32, 12 Uint64...).
type Option struct {
	Key   string
	Kind  uint8
	Value []byte
}

// Value kinds used in options blocks and user headers.
const (
	KindRaw    = 1
	KindString = 2
	KindBool   = 3
	KindUint32 = 11
	KindUint64 = 12
)

// Topic option keys of server 0.10 that strand sets.
const (
	OptMessageExpiry = "message_expiry" // Uint64 µs
	OptMaxTopicSize  = "max_topic_size" // Uint64 bytes
)

// AppendOptions appends an options block (no count: entries run to the end
// of the enclosing field): key_kind u8 (2) · key_len u32 · key · value_kind
// u8 · value_len u32 · value.
func AppendOptions(b []byte, opts []Option) []byte {
	for _, o := range opts {
		b = appendStr32(append(b, KindString), o.Key)
		b = append(appendU32(append(b, o.Kind), uint32(len(o.Value))), o.Value...)
	}
	return b
}

// maxOptions bounds the entries of one block (the server's limit).
const maxOptions = 1024

// ParseOptions decodes an options block.
func ParseOptions(b []byte) ([]Option, error) {
	r := NewReader(b)
	var opts []Option
	for r.Len() > 0 && r.err == nil {
		if len(opts) == maxOptions {
			r.Fail("more than %d options", maxOptions)
			break
		}
		if k := r.U8(); r.err == nil && k != KindString {
			r.Fail("option key kind %d, want %d", k, KindString)
		}
		key := r.Str32()
		kind := r.U8()
		val := r.Bytes(int(r.U32()))
		if r.err == nil && (key == "" || kind == 0) {
			r.Fail("option %q of kind %d", key, kind)
		}
		opts = append(opts, Option{Key: key, Kind: kind, Value: val})
	}
	return opts, r.err
}

// Uint64Option returns the option key holding v.
func Uint64Option(key string, v uint64) Option {
	return Option{Key: key, Kind: KindUint64, Value: appendU64(nil, v)}
}

// OptionUint64 returns the value of the Uint64 option key, if present.
func OptionUint64(opts []Option, key string) (uint64, bool, error) {
	for _, o := range opts {
		if o.Key != key {
			continue
		}
		if o.Kind != KindUint64 || len(o.Value) != 8 {
			return 0, false, fmt.Errorf("%w: option %s of kind %d and %d bytes, want Uint64", ErrMalformed, key, o.Kind, len(o.Value))
		}
		return uint64(o.Value[0]) | uint64(o.Value[1])<<8 | uint64(o.Value[2])<<16 | uint64(o.Value[3])<<24 |
			uint64(o.Value[4])<<32 | uint64(o.Value[5])<<40 | uint64(o.Value[6])<<48 | uint64(o.Value[7])<<56, true, nil
	}
	return 0, false, nil
}

// CreateStream is a CreateStream body. Legacy: Name. V012: Name · options
// block (empty: streams have no options in 0.10).
type CreateStream struct{ Name string }

// Append appends the body (identical in both protocols with no options).
func (c CreateStream) Append(b []byte, _ Protocol) []byte { return appendName(b, c.Name) }

// ParseCreateStream decodes a CreateStream body of protocol p.
func ParseCreateStream(b []byte, p Protocol) (CreateStream, error) {
	r := NewReader(b)
	c := CreateStream{Name: r.Name()}
	if p == V012 {
		if _, err := ParseOptions(r.Rest()); err != nil && r.err == nil {
			return c, err
		}
	}
	r.Done("create stream")
	return c, r.err
}

// CreateTopic is a CreateTopic body.
//
// Legacy: stream Identifier · partitions u32 · compression u8 · expiry u64
// µs · max_size u64 · replication u8 · Name.
//
// V012: stream Identifier · partitions u32 · Name · options block; expiry
// and maximum size travel as the message_expiry and max_topic_size options
// (omitted when 0: the server default), compression and replication are
// left to the server defaults.
type CreateTopic struct {
	Stream      Identifier
	Partitions  uint32
	Name        string
	Expiry      uint64 // µs; 0 = server default
	MaxSize     uint64 // bytes; 0 = server default
	Compression uint8  // legacy only; 0 sends 1 (none)
	Replication uint8  // legacy only
}

// Append appends the body in protocol p's layout.
func (c CreateTopic) Append(b []byte, p Protocol) []byte {
	b = appendU32(c.Stream.Append(b), c.Partitions)
	if p == V012 {
		b = appendName(b, c.Name)
		var opts []Option
		if c.Expiry != 0 {
			opts = append(opts, Uint64Option(OptMessageExpiry, c.Expiry))
		}
		if c.MaxSize != 0 {
			opts = append(opts, Uint64Option(OptMaxTopicSize, c.MaxSize))
		}
		return AppendOptions(b, opts)
	}
	comp := c.Compression
	if comp == 0 {
		comp = 1
	}
	b = appendU64(appendU64(append(b, comp), c.Expiry), c.MaxSize)
	return appendName(append(b, c.Replication), c.Name)
}

// ParseCreateTopic decodes a CreateTopic body of protocol p.
func ParseCreateTopic(b []byte, p Protocol) (CreateTopic, error) {
	r := NewReader(b)
	var c CreateTopic
	c.Stream = r.Identifier()
	c.Partitions = r.U32()
	if p == V012 {
		c.Name = r.Name()
		if r.err != nil {
			return c, r.err
		}
		opts, err := ParseOptions(r.Rest())
		if err != nil {
			return c, err
		}
		for _, o := range opts {
			if o.Key != OptMessageExpiry && o.Key != OptMaxTopicSize {
				return c, fmt.Errorf("%w: %w: topic option %q", ErrMalformed, StatusUnsupportedOptionKey, o.Key)
			}
		}
		var err1, err2 error
		c.Expiry, _, err1 = OptionUint64(opts, OptMessageExpiry)
		c.MaxSize, _, err2 = OptionUint64(opts, OptMaxTopicSize)
		if err1 != nil {
			return c, fmt.Errorf("%w (%w)", err1, StatusInvalidOptionValue)
		}
		if err2 != nil {
			return c, fmt.Errorf("%w (%w)", err2, StatusInvalidOptionValue)
		}
		return c, nil
	}
	c.Compression = r.U8()
	c.Expiry = r.U64()
	c.MaxSize = r.U64()
	c.Replication = r.U8()
	c.Name = r.Name()
	r.Done("create topic")
	return c, r.err
}

// Error makes a Status usable as an error (for wrapping in decoders that
// know which status a defect answers).
func (s Status) Error() string { return fmt.Sprintf("iggy status %d", uint32(s)) }

// StreamInfo is a stream as GetStream, GetStreams and CreateStream report
// it, with its topics when the reply lists them.
type StreamInfo struct {
	ID          uint32
	CreatedAt   uint64
	TopicsCount uint32
	SizeBytes   uint64
	Messages    uint64
	Name        string
	Topics      []TopicInfo
}

// TopicInfo is a topic as GetTopic, GetStream and CreateTopic report it.
type TopicInfo struct {
	ID              uint32
	CreatedAt       uint64
	PartitionsCount uint32
	Expiry          uint64
	Compression     uint8
	MaxSize         uint64
	Replication     uint8 // legacy only
	SizeBytes       uint64
	Messages        uint64
	Name            string
	Partitions      []PartitionInfo
}

// PartitionInfo is one partition of a GetTopic reply.
type PartitionInfo struct {
	ID            uint32
	CreatedAt     uint64
	Segments      uint32
	CurrentOffset uint64
	SizeBytes     uint64
	Messages      uint64
	Context       PartitionContext // V012 only
}

// PartitionContext is a V012 partition's identity as the server checks it
// on partition operations: the incarnation (metadata revision that created
// the partition), the consumer-group owner generation (0 without a group)
// and the metadata frontier the client has seen.
type PartitionContext struct {
	Incarnation     uint64
	OwnerGeneration uint64
	MetadataOp      uint64
}

// PartitionContextSize is the encoded size of a PartitionContext.
const PartitionContextSize = 24

// Append appends the three u64 fields.
func (c PartitionContext) Append(b []byte) []byte {
	return appendU64(appendU64(appendU64(b, c.Incarnation), c.OwnerGeneration), c.MetadataOp)
}

func (r *Reader) partitionContext() PartitionContext {
	return PartitionContext{Incarnation: r.U64(), OwnerGeneration: r.U64(), MetadataOp: r.U64()}
}

// ParsePartitionContext decodes a 24-byte context (the GetPartitionRoute
// reply).
func ParsePartitionContext(b []byte) (PartitionContext, error) {
	r := NewReader(b)
	c := r.partitionContext()
	r.Done("partition context")
	return c, r.err
}

// Sizes of partition entries: legacy and 0.9 (40), 0.10 with its context (64).
const (
	partitionInfoSize   = 40
	partitionInfoSize10 = 64
)

// AppendStream appends a stream header in protocol p's layout (without
// topics). Legacy: id u32 · created_at u64 · topics_count u32 · size u64 ·
// messages u64 · Name. V012 adds options_len u32 (0, no options).
func AppendStream(b []byte, s *StreamInfo, p Protocol) []byte {
	b = appendU64(appendU32(b, s.ID), s.CreatedAt)
	b = appendU64(appendU64(appendU32(b, s.TopicsCount), s.SizeBytes), s.Messages)
	b = appendName(b, s.Name)
	if p == V012 {
		b = appendU32(b, 0)
	}
	return b
}

// AppendTopic appends a topic header in protocol p's layout (without
// partitions). Legacy: id u32 · created_at u64 · partitions_count u32 ·
// expiry u64 · compression u8 · max_size u64 · replication u8 · size u64 ·
// messages u64 · Name. V012: the same without replication, then
// explicit_options_len u32 + block · derived_options_len u32 + block
// (strand's broker sends both empty).
func AppendTopic(b []byte, t *TopicInfo, p Protocol) []byte {
	b = appendU64(appendU32(b, t.ID), t.CreatedAt)
	b = appendU64(appendU32(b, t.PartitionsCount), t.Expiry)
	b = appendU64(append(b, t.Compression), t.MaxSize)
	if p == Legacy {
		b = append(b, t.Replication)
	}
	b = appendU64(appendU64(b, t.SizeBytes), t.Messages)
	b = appendName(b, t.Name)
	if p == V012 {
		b = appendU32(appendU32(b, 0), 0)
	}
	return b
}

// AppendPartition appends a partition entry: id u32 · created_at u64 ·
// segments u32 · current_offset u64 · size u64 · messages u64, and in V012
// the 24-byte context (the 64-byte form of crate 0.11.1-edge.3).
func AppendPartition(b []byte, pi *PartitionInfo, p Protocol) []byte {
	b = appendU64(appendU32(b, pi.ID), pi.CreatedAt)
	b = appendU64(appendU32(b, pi.Segments), pi.CurrentOffset)
	b = appendU64(appendU64(b, pi.SizeBytes), pi.Messages)
	if p == V012 {
		b = pi.Context.Append(b)
	}
	return b
}

func (r *Reader) stream(p Protocol) StreamInfo {
	var s StreamInfo
	s.ID, s.CreatedAt = r.U32(), r.U64()
	s.TopicsCount, s.SizeBytes, s.Messages = r.U32(), r.U64(), r.U64()
	s.Name = r.Name()
	if p == V012 {
		if _, err := ParseOptions(r.Bytes(int(r.U32()))); err != nil && r.err == nil {
			r.err = err
		}
	}
	return s
}

func (r *Reader) topic(p Protocol) TopicInfo {
	var t TopicInfo
	t.ID, t.CreatedAt = r.U32(), r.U64()
	t.PartitionsCount, t.Expiry = r.U32(), r.U64()
	t.Compression, t.MaxSize = r.U8(), r.U64()
	if p == Legacy {
		t.Replication = r.U8()
	}
	t.SizeBytes, t.Messages = r.U64(), r.U64()
	t.Name = r.Name()
	if p == V012 {
		for range 2 {
			if _, err := ParseOptions(r.Bytes(int(r.U32()))); err != nil && r.err == nil {
				r.err = err
			}
		}
	}
	return t
}

// ParseStream decodes a GetStream reply of protocol p: a stream header and
// its topics' headers. ok is false for the empty reply (no such stream).
func ParseStream(b []byte, p Protocol) (s StreamInfo, ok bool, err error) {
	if len(b) == 0 {
		return s, false, nil
	}
	r := NewReader(b)
	s = r.stream(p)
	for r.Len() > 0 && r.err == nil {
		s.Topics = append(s.Topics, r.topic(p))
	}
	if r.err == nil && len(s.Topics) != int(s.TopicsCount) {
		r.Fail("stream %q claims %d topics and lists %d", s.Name, s.TopicsCount, len(s.Topics))
	}
	return s, r.err == nil, r.err
}

// ParseTopic decodes a GetTopic (or CreateTopic) reply of protocol p: a
// topic header and its partitions. ok is false for the empty reply. V012
// partition entries may be 40 or 64 bytes long (the 0.10 form is not
// settled); the size is taken from the reply's length.
func ParseTopic(b []byte, p Protocol) (t TopicInfo, ok bool, err error) {
	if len(b) == 0 {
		return t, false, nil
	}
	r := NewReader(b)
	t = r.topic(p)
	if r.err != nil {
		return t, false, r.err
	}
	size := partitionInfoSize
	if p == V012 && t.PartitionsCount > 0 && r.Len() == int(t.PartitionsCount)*partitionInfoSize10 {
		size = partitionInfoSize10
	}
	if r.Len() != int(t.PartitionsCount)*size {
		r.Fail("topic %q claims %d partitions in %d bytes", t.Name, t.PartitionsCount, r.Len())
		return t, false, r.err
	}
	t.Partitions = make([]PartitionInfo, t.PartitionsCount)
	for i := range t.Partitions {
		pi := &t.Partitions[i]
		pi.ID, pi.CreatedAt = r.U32(), r.U64()
		pi.Segments, pi.CurrentOffset = r.U32(), r.U64()
		pi.SizeBytes, pi.Messages = r.U64(), r.U64()
		if size == partitionInfoSize10 {
			pi.Context = r.partitionContext()
		}
	}
	return t, r.err == nil, r.err
}

// ParseTopicRef decodes a body made of a stream and a topic identifier
// (GetTopic, DeleteTopic) followed by extra bytes, which it returns.
func ParseTopicRef(b []byte) (stream, topic Identifier, rest []byte, err error) {
	r := NewReader(b)
	stream, topic = r.Identifier(), r.Identifier()
	rest = r.Rest()
	return stream, topic, rest, r.err
}

// ParseStreams decodes a GetStreams reply: stream headers to the end (no
// count, in both protocols).
func ParseStreams(b []byte, p Protocol) ([]StreamInfo, error) {
	r := NewReader(b)
	var out []StreamInfo
	for r.Len() > 0 && r.err == nil {
		out = append(out, r.stream(p))
	}
	return out, r.err
}

// ParseTopics decodes a GetTopics reply: legacy, topic headers to the end;
// V012, count u32 then the headers.
func ParseTopics(b []byte, p Protocol) ([]TopicInfo, error) {
	r := NewReader(b)
	var out []TopicInfo
	if p == V012 {
		n := r.U32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			out = append(out, r.topic(p))
		}
		r.Done("topics")
		return out, r.err
	}
	for r.Len() > 0 && r.err == nil {
		out = append(out, r.topic(p))
	}
	return out, r.err
}

// AppendTopics appends a GetTopics reply in protocol p's layout.
func AppendTopics(b []byte, ts []TopicInfo, p Protocol) []byte {
	if p == V012 {
		b = appendU32(b, uint32(len(ts)))
	}
	for i := range ts {
		b = AppendTopic(b, &ts[i], p)
	}
	return b
}
