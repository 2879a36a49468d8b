package archive_test

import (
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/archive"
)

// An archive's URL and endpoint are checked before any store is reached;
// a mistake names its variable and never repeats a credential.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, ok := range [][2]string{
		{"file:///var/lib/hookgate/archive", ""},
		{"s3://acme-webhooks/hookgate", ""},
		{"s3://acme-webhooks", "minio.internal:9000"},
		{"s3://acme.webhooks/a/b", "http://127.0.0.1:7070"},
	} {
		if err := archive.Check(ok[0], ok[1]); err != nil {
			t.Errorf("%q %q: %v", ok[0], ok[1], err)
		}
	}
	for _, bad := range []struct{ url, endpoint, want string }{
		{"http://x/y", "", "GATEWAY_ARCHIVE_URL: the scheme is file or s3"},
		{"s3://", "", "GATEWAY_ARCHIVE_URL: an s3 URL names a bucket"},
		{"s3://hg/x", "", "3 to 63"},
		{"s3://user:sekrit@bucket/x", "", "no credentials"},
		{"s3://bucket/x?token=sekrit", "", "no credentials, query"},
		{"file://relative/dir", "", "an absolute directory"},
		{"file:///srv/archive", "http://127.0.0.1:7070", "GATEWAY_ARCHIVE_ENDPOINT: is for an s3:// archive"},
		{"s3://bucket/x", "http://u:sekrit@127.0.0.1:7070", "GATEWAY_ARCHIVE_ENDPOINT: must be host:port"},
		{"s3://bucket/x", "ftp://127.0.0.1:21", "GATEWAY_ARCHIVE_ENDPOINT"},
	} {
		err := archive.Check(bad.url, bad.endpoint)
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "sekrit") {
			t.Errorf("%q %q: %v, want %q", bad.url, bad.endpoint, err, bad.want)
		}
	}
}
