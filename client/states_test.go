package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"
)

// generatedConsts are the names of the constants of type typ in client.gen.go: the enum as
// the spec has it.
func generatedConsts(t *testing.T, typ string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "client.gen.go", nil, 0)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); ok && id.Name == typ {
				for _, n := range v.Names {
					names[n.Name] = true
				}
			}
		}
	}
	require.NotEmpty(t, names, "no constants of type %s in client.gen.go", typ)
	return names
}

// The lists in states.go hold every state of the generated enums, once: a state the spec
// adds must be added there too.
func TestStateListsHoldEveryGeneratedState(t *testing.T) {
	t.Parallel()
	requireWholeEnum(t, "BackfillState", BackfillStates())
	requireWholeEnum(t, "DagRunState", DagRunStates())
}

func requireWholeEnum[T interface {
	~string
	Valid() bool
}](t *testing.T, typ string, list []T) {
	t.Helper()
	seen := map[T]bool{}
	for _, s := range list {
		require.True(t, s.Valid(), s)
		require.False(t, seen[s], "%s listed twice", s)
		seen[s] = true
	}
	require.Len(t, seen, len(generatedConsts(t, typ)))
}
