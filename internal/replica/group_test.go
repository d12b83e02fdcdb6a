package replica

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A shard and a mirror are two makers of Group, not two modes of one type:
// a Replica (the shard) holds no mirror to branch on, and Host.Group hands
// out either as a Group.
func TestShardAndMirrorAreTwoTypes(t *testing.T) {
	mirrorType := reflect.TypeFor[*mirror]()
	shard := reflect.TypeFor[Replica]()
	for i := range shard.NumField() {
		if f := shard.Field(i); f.Type == mirrorType {
			t.Errorf("Replica.%s (%s) is a mirror mode inside the shard", f.Name, f.Type)
		}
	}
	group := reflect.TypeFor[Group]()
	assert.True(t, reflect.TypeFor[*Replica]().Implements(group), "a shard is a Group")
	assert.True(t, mirrorType.Implements(group), "a mirror is a Group")
}
