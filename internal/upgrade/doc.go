// Package upgrade proves the upgrade policy of docs/upgrading.md on real
// processes: the previous release's gateway, built from its commit in the
// repository's history, and this one, built from the working tree, run at
// once on one PostgreSQL database, both taking signed deliveries and both
// forwarding them, each exactly once; then this one stops and the previous
// one, started again, serves and forwards alone on the database this one
// migrated (a rollback).
//
//	go test -run TestPreviousReleaseBesideThisOne ./internal/upgrade
//
// The previous release is named once, in upgrade_test.go (previousVersion,
// previousCommit); a test holds it to the newest release CHANGELOG.md names
// before version.Number. Without git, or without that commit in the history
// (a shallow clone), the test is skipped, saying so; in CI (CI set) it fails
// instead. It has only tests.
package upgrade
