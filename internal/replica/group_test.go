package replica

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/mirror"
)

// A shard and a mirror are two makers of Group, not two modes of one type:
// a Replica (the shard) holds no mirror to branch on, a mirror (a package
// of its own, which cannot name a Replica or the Host) holds no shard to
// borrow a shard's machinery from (they share a groupcore.Core) and asks
// its host only what mirror.Host names, and Host.Group hands out either as
// a Group.
func TestShardAndMirrorAreTwoTypes(t *testing.T) {
	mirrorType, shardType := reflect.TypeFor[*mirror.Mirror](), reflect.TypeFor[*Replica]()
	shard := shardType.Elem()
	for i := range shard.NumField() {
		if f := shard.Field(i); f.Type == mirrorType {
			t.Errorf("Replica.%s (%s) is a mirror mode inside the shard", f.Name, f.Type)
		}
	}
	hostType := reflect.TypeFor[*Host]()
	for i := range mirrorType.Elem().NumField() {
		switch f := mirrorType.Elem().Field(i); f.Type {
		case shardType:
			t.Errorf("mirror.%s (%s) is a shard inside the mirror", f.Name, f.Type)
		case hostType:
			t.Errorf("mirror.%s (%s): the mirror reaches into its host's fields, not through mirror.Host", f.Name, f.Type)
		}
	}
	group := reflect.TypeFor[Group]()
	assert.True(t, reflect.TypeFor[*Replica]().Implements(group), "a shard is a Group")
	assert.True(t, mirrorType.Implements(group), "a mirror is a Group")
}

// testCore prepares c, a test's maker's core of group name on shard, whose
// events go to sink; it logs nothing.
func testCore(c *groupcore.Core, name string, shard uint64, sink Sink) {
	c.Init(slog.New(slog.DiscardHandler), 0, 0, name, shard, sink)
}
