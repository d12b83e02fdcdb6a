package fencelock

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	good := Config{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:7001"}, Dir: t.TempDir()}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	if good.SessionTTL != 0 || good.RTT != 0 {
		t.Fatalf("Validate changed its receiver: %+v", good)
	}
	bad := map[string]func(c *Config){
		"no replica ID":     func(c *Config) { c.ReplicaID = 0 },
		"no dir":            func(c *Config) { c.Dir = "" },
		"address, no port":  func(c *Config) { c.Members = map[uint64]string{1: "127.0.0.1"} },
		"port out of range": func(c *Config) { c.Members = map[uint64]string{1: "127.0.0.1:99999"} },
		"peer without port": func(c *Config) { c.Members = map[uint64]string{1: "127.0.0.1:7001", 2: "host"} },
		"listen addr":       func(c *Config) { c.ListenAddr = ":x" },
		"not a member":      func(c *Config) { c.ReplicaID = 2 },
		"join with members": func(c *Config) { c.Join = true },
		"short RTT":         func(c *Config) { c.RTT = time.Microsecond },
		"ticks":             func(c *Config) { c.ElectionTicks, c.HeartbeatTicks = 4, 2 },
		"short timeout":     func(c *Config) { c.ProposalTimeout = time.Millisecond },
		"TTL":               func(c *Config) { c.SessionTTL = time.Millisecond },
		"shared address":    func(c *Config) { c.Members = map[uint64]string{1: "127.0.0.1:7001", 3: "127.0.0.1:7001"} },
	}
	for name, mutate := range bad {
		c := good
		c.Members = map[uint64]string{1: "127.0.0.1:7001"}
		mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", name, err)
		}
	}
	c := good
	c.Members = map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7001"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Members[1] and Members[3] are both 127.0.0.1:7001") {
		t.Errorf("two members at one address: %v, want both named (Dragonboat panicked on it)", err)
	}
	c = good
	c.SessionTTL = 48 * time.Hour
	if err := c.Validate(); !errors.Is(err, ErrInvalidTTL) || !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("TTL 48h: %v, want ErrInvalidTTL and ErrInvalidConfig", err)
	}
}

func TestZeroFencerUsable(t *testing.T) {
	var f Fencer
	if err := f.Admit("r", 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit("r", 4); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("Admit(4) after 5 = %v, want ErrStaleToken", err)
	}
	if h := f.Highest("r"); h != 5 {
		t.Fatalf("Highest = %d, want 5", h)
	}
}

// The state machine's callbacks feed the expiry timers; a user who could
// call them could make the group expire a live session.
func TestNodeHasNoStateMachineCallbacks(t *testing.T) {
	typ := reflect.TypeOf(&Node{})
	for _, m := range []string{"Applied", "Restored", "SnapshotSaved", "SnapshotRestored"} {
		if _, ok := typ.MethodByName(m); ok {
			t.Errorf("Node exports %s", m)
		}
	}
}

// A log that keeps less than a snapshot's worth of entries behind each
// snapshot can be compacted past the snapshot a lagging replica is
// restoring as soon as the group takes its next one, so an unset
// CompactionOverhead keeps SnapshotEntries, whatever that is set to.
func TestCompactionKeepsASnapshotsWorthByDefault(t *testing.T) {
	base := Config{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:7001"}, Dir: t.TempDir()}
	for _, tc := range []struct {
		snapshot, overhead, want uint64
	}{
		{0, 0, DefaultSnapshotEntries},
		{30000, 0, 30000},
		{50, 0, 50},
		{30000, 700, 700}, // an operator's choice stands
	} {
		c := base
		c.SnapshotEntries, c.CompactionOverhead = tc.snapshot, tc.overhead
		if err := c.normalize(); err != nil {
			t.Fatal(err)
		}
		if c.CompactionOverhead != tc.want {
			t.Errorf("SnapshotEntries %d, CompactionOverhead %d: normalized to %d, want %d", tc.snapshot, tc.overhead, c.CompactionOverhead, tc.want)
		}
	}
	if DefaultCompactionOverhead < DefaultSnapshotEntries {
		t.Errorf("DefaultCompactionOverhead %d keeps less than DefaultSnapshotEntries %d", DefaultCompactionOverhead, DefaultSnapshotEntries)
	}
}
