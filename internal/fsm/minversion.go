package fsm

// minCodec is the first log version whose entries may carry each kind: a
// writer may put a command in an entry only at its kind's version or
// later, the decoder refuses it in an older entry, and a command whose
// kind needs more than its group's gate fails with ErrVersionGated before
// it is proposed. A new kind joins with one line: its kind and the
// codecVersion it is added in. A kind missing here is unknown to the codec.
var minCodec = [...]uint8{
	KindOpenSession:    1,
	KindKeepAlive:      1,
	KindCloseSession:   1,
	KindAcquire:        1,
	KindRelease:        1,
	KindCancel:         1,
	KindExpire:         1,
	KindCampaign:       1,
	KindResign:         1,
	KindProclaim:       1,
	KindLeaderStart:    2,
	KindRevoke:         2,
	KindEndSession:     2,
	KindResume:         3,
	KindAcquireShared:  3,
	KindUndelay:        3,
	KindExpireGrant:    3,
	KindKeepAliveBatch: 4,
	KindGate:           9,
	KindSeal:           11,
	KindGroupSeed:      9,
	KindGroupCreate:    9,
	KindGroupDrop:      9,
	KindGroupSetVoters: 9,
}

// MinCodec returns the first log version whose entries may carry kind k,
// or 0 for a kind the codec does not know.
func MinCodec(k Kind) int {
	if int(k) >= len(minCodec) {
		return 0
	}
	return int(minCodec[k])
}

// NeedsCodec returns the log version the entry that carries c must have
// at least: its kind's (MinCodec), and for a KindGate the version it
// raises the gate to, since it is the first entry written at it, and for
// a fenced Resume (Command.Fence) version 11.
func NeedsCodec(c *Command) int {
	need := MinCodec(c.Kind)
	if c.Kind == KindGate {
		need = max(need, c.Gate.Codec)
	}
	if c.Kind == KindResume && c.Fence {
		need = max(need, epochCodec)
	}
	return need
}

// PrefersCodec returns the log version that adds something cmd carries but
// can be written without (0: none): an OpenSession's Parent, which a group
// writes only once its gate is 10, and leaves out before.
func PrefersCodec(cmd Command) int {
	if cmd.Kind == KindOpenSession && cmd.Parent != 0 {
		return parentCodec
	}
	return 0
}
