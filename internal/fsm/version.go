package fsm

// CodecVersion is the version of the log entry format this build writes;
// it reads every version from 1 up to it (codec.go lists what each added),
// and refuses an entry of a higher one as ErrCorrupt.
func CodecVersion() int { return codecVersion }

// SnapshotVersion is the version of the snapshot format this build writes;
// it restores every version from 1 up to it (snapshot.go lists what each
// added), and refuses a snapshot of a higher one.
func SnapshotVersion() int { return snapshotVersion }
