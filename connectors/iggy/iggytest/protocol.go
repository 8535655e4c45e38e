package iggytest

import (
	"encoding/binary"
	"unicode/utf8"
)

// Command is an Iggy binary-protocol command code, as carried in the second
// u32 of every request frame. The constants below are the codes of Iggy
// server 0.8.0; the broker implements the subset listed in the package
// documentation and answers every other code with status 3 (InvalidCommand).
type Command uint32

// Command codes of Iggy server 0.8.0 (core/binary_protocol/src/codes.rs).
const (
	CmdPing                         Command = 1
	CmdGetStats                     Command = 10
	CmdGetSnapshotFile              Command = 11
	CmdGetClusterMetadata           Command = 12
	CmdGetMe                        Command = 20
	CmdGetClient                    Command = 21
	CmdGetClients                   Command = 22
	CmdGetUser                      Command = 31
	CmdGetUsers                     Command = 32
	CmdCreateUser                   Command = 33
	CmdDeleteUser                   Command = 34
	CmdUpdateUser                   Command = 35
	CmdUpdatePermissions            Command = 36
	CmdChangePassword               Command = 37
	CmdLoginUser                    Command = 38
	CmdLogoutUser                   Command = 39
	CmdGetPersonalAccessTokens      Command = 41
	CmdCreatePersonalAccessToken    Command = 42
	CmdDeletePersonalAccessToken    Command = 43
	CmdLoginWithPersonalAccessToken Command = 44
	CmdPollMessages                 Command = 100
	CmdSendMessages                 Command = 101
	CmdFlushUnsavedBuffer           Command = 102
	CmdGetConsumerOffset            Command = 120
	CmdStoreConsumerOffset          Command = 121
	CmdDeleteConsumerOffset         Command = 122
	CmdGetStream                    Command = 200
	CmdGetStreams                   Command = 201
	CmdCreateStream                 Command = 202
	CmdDeleteStream                 Command = 203
	CmdUpdateStream                 Command = 204
	CmdPurgeStream                  Command = 205
	CmdGetTopic                     Command = 300
	CmdGetTopics                    Command = 301
	CmdCreateTopic                  Command = 302
	CmdDeleteTopic                  Command = 303
	CmdUpdateTopic                  Command = 304
	CmdPurgeTopic                   Command = 305
	CmdCreatePartitions             Command = 402
	CmdDeletePartitions             Command = 403
	CmdDeleteSegments               Command = 503
	CmdGetConsumerGroup             Command = 600
	CmdGetConsumerGroups            Command = 601
	CmdCreateConsumerGroup          Command = 602
	CmdDeleteConsumerGroup          Command = 603
	CmdJoinConsumerGroup            Command = 604
	CmdLeaveConsumerGroup           Command = 605
)

var commandNames = map[Command]string{
	CmdPing: "ping", CmdGetStats: "get_stats", CmdGetSnapshotFile: "get_snapshot_file",
	CmdGetClusterMetadata: "get_cluster_metadata", CmdGetMe: "get_me", CmdGetClient: "get_client",
	CmdGetClients: "get_clients", CmdGetUser: "get_user", CmdGetUsers: "get_users",
	CmdCreateUser: "create_user", CmdDeleteUser: "delete_user", CmdUpdateUser: "update_user",
	CmdUpdatePermissions: "update_permissions", CmdChangePassword: "change_password",
	CmdLoginUser: "login_user", CmdLogoutUser: "logout_user",
	CmdGetPersonalAccessTokens: "get_personal_access_tokens", CmdCreatePersonalAccessToken: "create_personal_access_token",
	CmdDeletePersonalAccessToken: "delete_personal_access_token", CmdLoginWithPersonalAccessToken: "login_with_personal_access_token",
	CmdPollMessages: "poll_messages", CmdSendMessages: "send_messages", CmdFlushUnsavedBuffer: "flush_unsaved_buffer",
	CmdGetConsumerOffset: "get_consumer_offset", CmdStoreConsumerOffset: "store_consumer_offset",
	CmdDeleteConsumerOffset: "delete_consumer_offset", CmdGetStream: "get_stream", CmdGetStreams: "get_streams",
	CmdCreateStream: "create_stream", CmdDeleteStream: "delete_stream", CmdUpdateStream: "update_stream",
	CmdPurgeStream: "purge_stream", CmdGetTopic: "get_topic", CmdGetTopics: "get_topics",
	CmdCreateTopic: "create_topic", CmdDeleteTopic: "delete_topic", CmdUpdateTopic: "update_topic",
	CmdPurgeTopic: "purge_topic", CmdCreatePartitions: "create_partitions", CmdDeletePartitions: "delete_partitions",
	CmdDeleteSegments: "delete_segments", CmdGetConsumerGroup: "get_consumer_group",
	CmdGetConsumerGroups: "get_consumer_groups", CmdCreateConsumerGroup: "create_consumer_group",
	CmdDeleteConsumerGroup: "delete_consumer_group", CmdJoinConsumerGroup: "join_consumer_group",
	CmdLeaveConsumerGroup: "leave_consumer_group",
}

// String returns the server's snake_case name of the command, or
// "unknown(N)" for a code the server does not define.
func (c Command) String() string {
	if n, ok := commandNames[c]; ok {
		return n
	}
	return "unknown(" + itoa(uint64(c)) + ")"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// Status codes (IggyError codes of server 0.8.0) that the broker answers.
// They are exported so that tests can inject them with FailNext or a
// ControlFunc and compare them with the SDK's errors.
const (
	StatusOK                               uint32 = 0
	StatusError                            uint32 = 1
	StatusInvalidCommand                   uint32 = 3
	StatusInvalidFormat                    uint32 = 4
	StatusFeatureUnavailable               uint32 = 5
	StatusInvalidIdentifier                uint32 = 6
	StatusDisconnected                     uint32 = 8
	StatusResourceNotFound                 uint32 = 20
	StatusStaleClient                      uint32 = 30
	StatusUnauthenticated                  uint32 = 40
	StatusUnauthorized                     uint32 = 41
	StatusInvalidCredentials               uint32 = 42
	StatusInvalidUsername                  uint32 = 43
	StatusInvalidPassword                  uint32 = 44
	StatusUserAlreadyExists                uint32 = 46
	StatusUserInactive                     uint32 = 47
	StatusCannotDeleteUser                 uint32 = 48
	StatusCannotChangePermissions          uint32 = 49
	StatusInvalidPersonalAccessTokenName   uint32 = 50
	StatusPersonalAccessTokenAlreadyExists uint32 = 51
	StatusPersonalAccessTokensLimitReached uint32 = 52
	StatusPersonalAccessTokenExpired       uint32 = 54
	StatusInvalidSizeBytes                 uint32 = 80
	StatusInvalidClientID                  uint32 = 101
	StatusStreamIDNotFound                 uint32 = 1009
	StatusStreamNameAlreadyExists          uint32 = 1012
	StatusInvalidTopicSize                 uint32 = 1019
	StatusTopicIDNotFound                  uint32 = 2010
	StatusTopicNameAlreadyExists           uint32 = 2013
	StatusTooManyPartitions                uint32 = 2015
	StatusInvalidPartitionsCount           uint32 = 2019
	StatusPartitionNotFound                uint32 = 3007
	StatusConsumerOffsetNotFound           uint32 = 3021
	StatusNotResolvedConsumer              uint32 = 3022
	StatusInvalidMessagesCount             uint32 = 4009
	StatusTooBigUserHeaders                uint32 = 4017
	StatusTooBigMessagePayload             uint32 = 4022
	StatusInvalidMessagePayloadLength      uint32 = 4025
	StatusNonZeroOffset                    uint32 = 4031
	StatusNonZeroTimestamp                 uint32 = 4032
	StatusMissingIndex                     uint32 = 4033
	StatusInvalidIndexesCount              uint32 = 4035
	StatusInvalidMessagesSize              uint32 = 4036
	StatusInvalidOffset                    uint32 = 4100
	StatusConsumerGroupIDNotFound          uint32 = 5000
	StatusConsumerGroupNameAlreadyExists   uint32 = 5004
	StatusConsumerGroupMemberNotFound      uint32 = 5006
	StatusCannotReadIndexPosition          uint32 = 10011
)

// Limits of server 0.8.0.
const (
	maxControlPayload   = 10 * 1024 * 1024 // non-send request payloads
	maxPartitionsPerReq = 1000
	maxPayloadSize      = 10 * 1000 * 1000
	maxUserHeadersSize  = 100 * 1000
	messageHeaderSize   = 64
	indexSize           = 16
	segmentSizeDefault  = 1 << 30 // server config: segment.size = "1 GiB"
	minUsernameLength   = 3
	maxUsernameLength   = 50
	minPasswordLength   = 3
	maxPasswordLength   = 100
	defaultMaxSendBytes = 256 << 20
)

// statusError is a handler failure that becomes a response status.
type statusError uint32

func (e statusError) Error() string { return "iggy status " + itoa(uint64(e)) }

// decoder reads the wire primitives of request payloads. Its first failure
// is kept as the status the server would answer; later reads are no-ops.
type decoder struct {
	b   []byte
	off int
	st  uint32
}

func (d *decoder) fail(st uint32) {
	if d.st == 0 {
		d.st = st
	}
}

func (d *decoder) u8() uint8 {
	if d.st != 0 || d.off+1 > len(d.b) {
		d.fail(StatusInvalidCommand)
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) u32() uint32 {
	if d.st != 0 || d.off+4 > len(d.b) {
		d.fail(StatusInvalidCommand)
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64() uint64 {
	if d.st != 0 || d.off+8 > len(d.b) {
		d.fail(StatusInvalidCommand)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decoder) bytes(n int) []byte {
	if d.st != 0 || n < 0 || d.off+n > len(d.b) {
		d.fail(StatusInvalidCommand)
		return nil
	}
	v := d.b[d.off : d.off+n]
	d.off += n
	return v
}

// str reads n bytes of UTF-8 (read_str: EOF and bad UTF-8 are InvalidCommand).
func (d *decoder) str(n int) string {
	b := d.bytes(n)
	if d.st != 0 {
		return ""
	}
	if !utf8.Valid(b) {
		d.fail(StatusInvalidCommand)
		return ""
	}
	return string(b)
}

// name reads a WireName: u8 length 1..255 then UTF-8 bytes.
func (d *decoder) name() string {
	n := int(d.u8())
	if d.st != 0 {
		return ""
	}
	if n == 0 {
		d.fail(StatusInvalidFormat)
		return ""
	}
	return d.str(n)
}

// ident is a decoded Identifier: numeric (isName false) or a name.
type ident struct {
	num    uint32
	name   string
	isName bool
}

func (id ident) String() string {
	if id.isName {
		return id.name
	}
	return itoa(uint64(id.num))
}

// ident reads a WireIdentifier.
func (d *decoder) ident() ident {
	kind := d.u8()
	n := int(d.u8())
	v := d.bytes(n)
	if d.st != 0 {
		return ident{}
	}
	switch kind {
	case 1:
		if n != 4 {
			d.fail(StatusInvalidFormat)
			return ident{}
		}
		return ident{num: binary.LittleEndian.Uint32(v)}
	case 2:
		if n == 0 {
			d.fail(StatusInvalidFormat)
			return ident{}
		}
		if !utf8.Valid(v) {
			d.fail(StatusInvalidCommand)
			return ident{}
		}
		return ident{name: string(v), isName: true}
	default:
		d.fail(StatusInvalidCommand)
		return ident{}
	}
}

// consumerRef is a decoded Consumer: kind 1 single consumer, 2 group.
type consumerRef struct {
	kind uint8
	id   ident
}

func (d *decoder) consumer() consumerRef {
	kind := d.u8()
	if d.st == 0 && kind != 1 && kind != 2 {
		d.fail(StatusInvalidCommand)
	}
	id := d.ident()
	return consumerRef{kind: kind, id: id}
}

// optPartition reads the 5-byte optional partition id.
func (d *decoder) optPartition() (uint32, bool) {
	flag := d.u8()
	v := d.u32()
	return v, flag == 1
}

// encoder appends response primitives to a byte slice.
type encoder []byte

func (e encoder) u8(v uint8) encoder   { return append(e, v) }
func (e encoder) u16(v uint16) encoder { return binary.LittleEndian.AppendUint16(e, v) }
func (e encoder) u32(v uint32) encoder { return binary.LittleEndian.AppendUint32(e, v) }
func (e encoder) u64(v uint64) encoder { return binary.LittleEndian.AppendUint64(e, v) }
func (e encoder) name(s string) encoder {
	e = append(e, byte(len(s)))
	return append(e, s...)
}
func (e encoder) str32(s string) encoder {
	e = e.u32(uint32(len(s)))
	return append(e, s...)
}
