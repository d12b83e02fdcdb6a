package replica

import (
	"net/netip"
	"strings"
)

// validHost accepts an IP address or a DNS name (the transport resolves a
// name at every dial), so that a typo such as a comma or a space in a
// name is refused at start rather than retried as a peer that never
// answers. Underscores are let through: some private zones use them.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
