package httpapi

import (
	"io"
	"net/http"
	"os"
	"strconv"
)

// SnapshotPath is the backup endpoint: GET answers a backup of every group
// of the deployment (fencelock.Node.Snapshot), the file `fencelock snapshot
// save` writes and `fencelock snapshot restore` reads.
const SnapshotPath = "/v1/snapshot"

// needBackup allows a backup only to a token with admin on every name: the
// file holds every session's secret (its resume credential) and every
// lock's name, of every group.
func needBackup(p *principal, r *http.Request) error {
	if !p.may(RightAdmin, AllNames) {
		return errNoRight(p, RightAdmin, ` on "*" (a backup holds every session's credentials)`)
	}
	return nil
}

// snapshot answers GET /v1/snapshot with a backup, as
// application/octet-stream with its Content-Length. The backup is written
// to a temporary file first, so that a failure (no quorum in a group, the
// request's context ending) is answered as an error with its code rather
// than as a 200 cut short; a client that gets fewer bytes than announced,
// or a damaged file, finds out from the file's checksum at restore.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	f, err := os.CreateTemp("", "fencelock-snapshot-")
	if err != nil {
		writeError(w, err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := os.Chmod(f.Name(), 0o600); err != nil {
		writeError(w, err)
		return
	}
	if err := s.node.Snapshot(r.Context(), f); err != nil {
		writeError(w, err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}
