package shard

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
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

// CheckHostPort refuses an address Dragonboat could not use, in our words
// rather than its own; callers wrap the error in their sentinel.
func CheckHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || host == "" || perr != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("address %q is not host:port with a port in 1-65535", Truncate(addr, 64))
	}
	if !validHost(host) {
		return fmt.Errorf("address %q: the host is neither an IP address nor a DNS name", Truncate(addr, 64))
	}
	return nil
}

// Truncate cuts s to n bytes, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
