// Package migrations holds hookgate's schema as append-only numbered SQL files
// (NNNN_name.sql). A file, once released, is never edited: a change is a new
// file. They are applied by schema.Migrate, after River's own migrations.
package migrations

import "embed"

// FS holds the SQL files.
//
//go:embed *.sql
var FS embed.FS
