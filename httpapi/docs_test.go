package httpapi

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/http.md's table of error codes is the contract other languages'
// clients are written from: every code the server can send is in it with
// its status, and it names no code the server does not have. The codes
// and statuses are read from errors.go's declarations and their comments
// ("// 409: ..."), so a code added there without its row fails here.
func TestErrorCodesDocumented(t *testing.T) {
	code := map[string]string{} // code -> status, from errors.go
	for _, c := range codeConsts(t) {
		status := regexp.MustCompile(`^\d{3}`).FindString(c.comment)
		require.NotEmpty(t, status, "%s's comment starts with its HTTP status", c.name)
		code[c.value] = status
	}
	require.Greater(t, len(code), 20, "the codes were read from errors.go")

	doc, err := os.ReadFile("../docs/http.md")
	require.NoError(t, err)
	rows := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	documented := map[string]string{}
	for _, r := range rows {
		documented[r[2]] = r[1]
	}
	for c, status := range code {
		require.Contains(t, documented, c, "code %q (%s) has no row in docs/http.md's error table", c, status)
		require.Equal(t, status, documented[c], "docs/http.md gives code %q another status than errors.go", c)
	}
	for c := range documented {
		require.Contains(t, code, c, "docs/http.md documents code %q, which errors.go does not declare", c)
	}
}
