package session

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The session layer reaches a group only through its role (Group, group.go):
// no file of this package (its tests aside) names a maker of the role in
// internal/replica, nor the replica's Host that makes them. A shard and a
// mirror can then change, or move to packages of their own, without this
// package knowing.
func TestSessionKnowsNoGroupMaker(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	makers := []string{"Replica", "Host", "Mirror", "Start"}
	var named []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "replica" && slices.Contains(makers, sel.Sel.Name) {
				named = append(named, fset.Position(sel.Pos()).String()+": replica."+sel.Sel.Name)
			}
			return true
		})
	}
	require.Empty(t, named, "the session layer names a maker of a group's role")
}
