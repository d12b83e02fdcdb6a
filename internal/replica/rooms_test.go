package replica

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The rooms cut out of this package sit below it: each imports the standard
// library and the few packages its map comment names, never this package
// nor what runs a group (Dragonboat, the transport, the session layer), so
// that the host, the shard and the mirror can import them and a change to
// the machinery above cannot reach into a format below it (the wire's
// bytes, the Dir's files) or into what both makers of a group share.
func TestRoomsBelowImportOnlyTheirOwn(t *testing.T) {
	const module = "github.com/fencelock/fencelock/"
	rooms := map[string][]string{
		"wire":      {module + "internal/fsm"},
		"datadir":   {module + "internal/peering", module + "lockapi"},
		"groupcore": {module + "internal/fsm", module + "lockapi"},
	}
	for room, allowed := range rooms {
		files, err := filepath.Glob(filepath.Join(room, "*.go"))
		require.NoError(t, err)
		var sources []string
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				sources = append(sources, f)
			}
		}
		require.NotEmpty(t, sources, "room %s has no files", room)
		for _, f := range sources {
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range file.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				std := !strings.Contains(strings.Split(path, "/")[0], ".")
				require.True(t, std || slices.Contains(allowed, path), "%s imports %s: room %s may import the standard library and %v", f, path, room, allowed)
			}
		}
	}
}

// The host reaches a mirror through the mirror's methods (retire,
// handedOver, handover, run, stop...), as the mirror reaches its host
// through mirrorHost: no file but mirror.go names a field that only the
// mirror has (what it shares with a shard, its groupCore, aside), so that
// the mirror can move to a package of its own with the host's side as it
// is. A field name that another type of the package also declares (as a
// field or a method) cannot be told apart without types, and is not
// checked.
func TestHostReachesMirrorThroughItsMethods(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	parsed := map[string]*ast.File{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		parsed[f] = file
	}
	own := map[string]bool{}       // the mirror's own fields
	elsewhere := map[string]bool{} // fields other struct types declare, and methods
	for _, file := range parsed {
		ast.Inspect(file, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && fd.Recv != nil {
				elsewhere[fd.Name.Name] = true // a method, of whichever type
			}
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, field := range st.Fields.List {
				for _, name := range field.Names {
					if ts.Name.Name == "mirror" {
						own[name.Name] = true
					} else {
						elsewhere[name.Name] = true
					}
				}
			}
			return true
		})
	}
	require.Contains(t, own, "retired", "the mirror's fields were not found")
	var reached []string
	for f, file := range parsed {
		if f == "mirror.go" {
			continue
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && own[sel.Sel.Name] && !elsewhere[sel.Sel.Name] {
				reached = append(reached, fset.Position(sel.Pos()).String()+": ."+sel.Sel.Name)
			}
			return true
		})
	}
	slices.Sort(reached)
	require.Empty(t, reached, "files that reach into a mirror's own fields")
}
