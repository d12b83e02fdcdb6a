package httpapi

import "github.com/fencelock/fencelock"

// VersionJSON is what a replica runs (fencelock.Version), in GET
// /v1/status and `fencelock version -o json`.
type VersionJSON struct {
	// Version is the fencelock module's version, "devel" when the build
	// carries none.
	Version string `json:"version"`
	// Commit is the VCS revision of the build; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Codec and Snapshot are the newest log entry and snapshot format
	// versions the replica reads (every version from 1 up to each); what
	// each group writes is its "writes".
	Codec    int `json:"codec"`
	Snapshot int `json:"snapshot"`
}

// FormatsJSON is the formats a group writes (fencelock.Formats): its
// version gate.
type FormatsJSON struct {
	Codec    int `json:"codec"`
	Snapshot int `json:"snapshot"`
}

func newFormatsJSON(f fencelock.Formats) FormatsJSON {
	return FormatsJSON{Codec: f.Codec, Snapshot: f.Snapshot}
}

// NewVersionJSON returns v as the API shows it.
func NewVersionJSON(v fencelock.Version) VersionJSON {
	return VersionJSON{Version: v.Version, Commit: v.Commit, Codec: v.Codec, Snapshot: v.Snapshot}
}
