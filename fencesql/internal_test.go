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
	require.Equal(t, `CREATE TABLE IF NOT EXISTS "marks" (resource TEXT PRIMARY KEY, highest BIGINT NOT NULL, grp BIGINT NOT NULL DEFAULT 0)`, pg.create)
	require.Equal(t, `INSERT INTO "marks" (resource, highest, grp) VALUES ($1, $2, $3) `+
		`ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest, `+
		`grp = CASE WHEN "marks".grp = 0 THEN excluded.grp ELSE "marks".grp END `+
		`WHERE "marks".highest <= excluded.highest AND ("marks".grp = 0 OR "marks".grp = excluded.grp)`, pg.upsert)
	require.Equal(t, `SELECT highest, grp FROM "marks" WHERE resource = $1`, pg.mark)
	require.Equal(t, `INSERT INTO "marks" (resource, highest, grp) VALUES ($1, $2, $3) `+
		`ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest, grp = excluded.grp`, pg.rekey)
	lite := buildQueries(SQLite, "marks")
	require.Equal(t, `SELECT highest, grp FROM "marks" WHERE resource = ?`, lite.mark)
	require.Equal(t, pg.create, lite.create)
	require.Equal(t, pg.upsert, dollarN(lite.upsert))
}

// Groups are stored as their bits: every uint64, the top bit included,
// round-trips.
func TestEncodeGroup(t *testing.T) {
	for _, g := range []uint64{0, 1, 0xfeed, 1<<63 - 1, 1 << 63, probeGroup, math.MaxUint64} {
		require.Equal(t, g, decodeGroup(encodeGroup(g)))
	}
	require.Equal(t, int64(-1), encodeGroup(math.MaxUint64))
	require.Zero(t, encodeGroup(0), "0, no group, is the column's default")
}
