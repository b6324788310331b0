// Package pgtest tests package watertightsql against a real PostgreSQL,
// through pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib). It is
// a module of its own so that the root module keeps to the standard
// library.
//
// The tests need a server: WATERTIGHT_POSTGRES_DSN names it (a URL such as
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable, for a role
// that may create tables and terminate its own sessions). scripts/test.sh
// starts a throwaway one (Debian's postgresql) and sets it. Without it the
// tests are skipped, unless WATERTIGHT_REQUIRE_POSTGRES=1 (as in CI), which
// makes them fail.
package pgtest
