package httpapi

import (
	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/lockapi"
)

// VersionJSON is what a replica runs (fencelock.Version), in GET
// /v1/status and `fencelock version -o json`.
// It is lockapi.VersionJSON, which the Go client decodes too.
type VersionJSON = lockapi.VersionJSON

// FormatsJSON is the formats a group writes (fencelock.Formats): its
// version gate. It is lockapi.FormatsJSON, which the Go client decodes too.
type FormatsJSON = lockapi.FormatsJSON

func newFormatsJSON(f fencelock.Formats) FormatsJSON {
	return FormatsJSON{Codec: f.Codec, Snapshot: f.Snapshot}
}

// NewVersionJSON returns v as the API shows it.
func NewVersionJSON(v fencelock.Version) VersionJSON {
	return VersionJSON{Version: v.Version, Commit: v.Commit, Codec: v.Codec, Snapshot: v.Snapshot}
}
