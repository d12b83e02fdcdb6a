package fencesql

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The stored form keeps the order of tokens across the sign boundary of int64.
func TestEncodeKeepsOrder(t *testing.T) {
	tokens := []uint64{0, 1, 2, 1<<63 - 2, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64 - 1, math.MaxUint64}
	for i, tok := range tokens {
		require.Equal(t, tok, decode(encode(tok)))
		if i > 0 {
			require.Less(t, encode(tokens[i-1]), encode(tok), "%d < %d", tokens[i-1], tok)
		}
	}
	require.Equal(t, int64(math.MinInt64), encode(0))
	require.Equal(t, int64(0), encode(1<<63))
	require.Equal(t, int64(math.MaxInt64), encode(math.MaxUint64))
}

func TestQueries(t *testing.T) {
	pg := buildQueries(Postgres, "marks")
	require.Equal(t, `INSERT INTO "marks" (resource, highest) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest WHERE "marks".highest <= excluded.highest`, pg.upsert)
	require.Equal(t, `SELECT highest FROM "marks" WHERE resource = $1`, pg.highest)
	lite := buildQueries(SQLite, "marks")
	require.Equal(t, `SELECT highest FROM "marks" WHERE resource = ?`, lite.highest)
	require.Equal(t, pg.create, lite.create)
}
