# shellcheck shell=bash
# Starts a throwaway PostgreSQL for the fencesql tests. Source it (it exports
# into the caller's shell), and call fencelock_pg_stop when done:
#
#	source .ci/postgres.sh
#	go test ./fencesql/
#	fencelock_pg_stop
#
# It exports FENCELOCK_TEST_POSTGRES_DSN (postgres://postgres@127.0.0.1:PORT/
# postgres?sslmode=disable) and FENCELOCK_PG_DIR (the cluster, socket and log).
# If FENCELOCK_TEST_POSTGRES_DSN is already set (a database provided by the
# CI), it starts nothing. Sourcing it again while its server runs reuses that
# server; fencelock_pg_stop may be called any number of times.
#
# PostgreSQL comes from the machine (any /usr/lib/postgresql/*/bin, or initdb
# on PATH), else from apt-get install postgresql (Debian, as root). initdb and
# postgres refuse to run as root, so as root the server runs as the system
# user fencelock-ci, created if missing. The server listens on 127.0.0.1 on a
# free port with trust authentication, and runs with fsync off: it is a test
# fixture, thrown away by fencelock_pg_stop.
#
# No trap is set and the caller's shell options are left alone; errors are
# reported and make the sourcing return non-zero (which ends a set -e caller).

FENCELOCK_PG_USER=fencelock-ci

_fencelock_pg_log() { echo "postgres.sh: $*" >&2; }

# _fencelock_pg_as runs a command as the server's user.
_fencelock_pg_as() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u "$FENCELOCK_PG_USER" -- "$@"
	else
		"$@"
	fi
}

# _fencelock_pg_find_bin prints the directory holding initdb, pg_ctl and
# postgres, newest major version first.
_fencelock_pg_find_bin() {
	local initdb pkg
	initdb=$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1) || true
	if [ -z "$initdb" ] && command -v dpkg-query >/dev/null 2>&1; then
		for pkg in $(dpkg-query -W -f '${Package}\n' 'postgresql-[0-9]*' 2>/dev/null | sort -V -r); do
			initdb=$(dpkg -L "$pkg" 2>/dev/null | grep '/initdb$' | head -n 1)
			[ -n "$initdb" ] && break
		done
	fi
	if [ -z "$initdb" ]; then
		initdb=$(command -v initdb 2>/dev/null) || true
		# Follow a symlink such as /usr/local/bin/initdb, so that pg_ctl
		# and postgres are found next to the real binary.
		[ -n "$initdb" ] && initdb=$(readlink -f "$initdb")
	fi
	[ -n "$initdb" ] && [ -x "$initdb" ] || return 1
	dirname "$initdb"
}

_fencelock_pg_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		_fencelock_pg_log "PostgreSQL not found, and cannot apt-get install it (not root, or no apt-get)"
		return 1
	fi
	_fencelock_pg_log "PostgreSQL not found: apt-get install -y postgresql"
	# policy-rc.d-less containers may try to start the package's own cluster
	# on 5432; that is harmless here, as ours uses its own port and directory.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 ||
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
}

# _fencelock_pg_free_port prints a TCP port nobody listens on.
_fencelock_pg_free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' && return 0
	fi
	local port
	for ((port = 55432 + RANDOM % 1000; port < 65000; port++)); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

_fencelock_pg_running() {
	[ -n "${FENCELOCK_PG_DIR:-}" ] && [ -n "${FENCELOCK_PG_BIN:-}" ] && [ -d "$FENCELOCK_PG_DIR/data" ] &&
		_fencelock_pg_as "$FENCELOCK_PG_BIN/pg_ctl" status -D "$FENCELOCK_PG_DIR/data" >/dev/null 2>&1
}

fencelock_pg_start() {
	if _fencelock_pg_running; then
		_fencelock_pg_log "already running in $FENCELOCK_PG_DIR: $FENCELOCK_TEST_POSTGRES_DSN"
		return 0
	fi
	if [ -n "${FENCELOCK_TEST_POSTGRES_DSN:-}" ]; then
		_fencelock_pg_log "FENCELOCK_TEST_POSTGRES_DSN is set; using that database, starting none"
		return 0
	fi

	local bin dir port attempt tool
	if ! bin=$(_fencelock_pg_find_bin); then
		_fencelock_pg_install || { _fencelock_pg_log "apt-get install postgresql failed"; return 1; }
		bin=$(_fencelock_pg_find_bin) || { _fencelock_pg_log "initdb not found after installing postgresql"; return 1; }
	fi
	for tool in initdb pg_ctl postgres; do
		[ -x "$bin/$tool" ] || { _fencelock_pg_log "$bin/$tool missing"; return 1; }
	done
	_fencelock_pg_log "using $("$bin/postgres" --version) from $bin"

	if [ "$(id -u)" = 0 ] && ! id -u "$FENCELOCK_PG_USER" >/dev/null 2>&1; then
		useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$FENCELOCK_PG_USER" ||
			{ _fencelock_pg_log "useradd $FENCELOCK_PG_USER failed"; return 1; }
		_fencelock_pg_log "created user $FENCELOCK_PG_USER"
	fi
	dir=$(mktemp -d "${TMPDIR:-/tmp}/fencelock-pg.XXXXXX") || return 1
	chmod 0755 "$dir"
	[ "$(id -u)" = 0 ] && chown "$FENCELOCK_PG_USER:" "$dir"
	if ! _fencelock_pg_as "$bin/initdb" -A trust -U postgres -E UTF8 --locale=C -D "$dir/data" >"$dir/initdb.log" 2>&1; then
		_fencelock_pg_log "initdb failed:"
		cat "$dir/initdb.log" >&2
		rm -rf "$dir"
		return 1
	fi

	# The port is free when chosen but may be taken before the server binds
	# it: try a few.
	for attempt in 1 2 3; do
		port=$(_fencelock_pg_free_port) || { _fencelock_pg_log "no free port"; rm -rf "$dir"; return 1; }
		if _fencelock_pg_as "$bin/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/server.log" \
			-o "-k $dir -p $port -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
			>/dev/null; then
			export FENCELOCK_PG_DIR=$dir FENCELOCK_PG_BIN=$bin FENCELOCK_PG_PORT=$port
			export FENCELOCK_TEST_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
			_fencelock_pg_log "started in $dir as $(_fencelock_pg_as id -un): $FENCELOCK_TEST_POSTGRES_DSN"
			return 0
		fi
		_fencelock_pg_log "pg_ctl start on port $port failed (attempt $attempt):"
		tail -n 20 "$dir/server.log" >&2
	done
	rm -rf "$dir"
	return 1
}

# fencelock_pg_stop stops the server fencelock_pg_start started and removes
# its directory. Without one, it does nothing. A failure to stop is reported
# but does not fail the caller: the tests have run by then.
fencelock_pg_stop() {
	if [ -z "${FENCELOCK_PG_DIR:-}" ]; then
		_fencelock_pg_log "no server of ours to stop"
		return 0
	fi
	if _fencelock_pg_running; then
		_fencelock_pg_as "$FENCELOCK_PG_BIN/pg_ctl" stop -w -m fast -D "$FENCELOCK_PG_DIR/data" >/dev/null ||
			_fencelock_pg_log "pg_ctl stop failed; see $FENCELOCK_PG_DIR/server.log"
	fi
	if _fencelock_pg_running; then
		_fencelock_pg_log "server in $FENCELOCK_PG_DIR still running; leaving the directory"
	else
		rm -rf "$FENCELOCK_PG_DIR"
		_fencelock_pg_log "stopped and removed $FENCELOCK_PG_DIR"
	fi
	unset FENCELOCK_PG_DIR FENCELOCK_PG_BIN FENCELOCK_PG_PORT FENCELOCK_TEST_POSTGRES_DSN
	return 0
}

fencelock_pg_start
