package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ErrNoObject means the archive store holds no object by that key.
var ErrNoObject = errors.New("no such object in the archive")

// Store is where archived objects go: a directory (file://) or an
// S3-compatible bucket (s3://). Keys are slash-separated.
type Store interface {
	// Put writes the object key from r, size bytes, replacing one there.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object key; ErrNoObject when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// String names the store, its credentials never.
	String() string
}

// Check checks an archive's URL and endpoint as Open reads them, without
// reaching the store; its errors name the variable, never a value that may
// hold a credential.
func Check(rawURL, endpoint string) error {
	_, _, err := parse(rawURL, endpoint)
	return err
}

// parse reads an archive's URL (and endpoint, for s3).
func parse(rawURL, endpoint string) (*url.URL, *url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, nil, errors.New("GATEWAY_ARCHIVE_URL: must be file:///absolute/dir or s3://bucket/prefix, with no credentials, query or fragment (credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return nil, nil, errors.New("GATEWAY_ARCHIVE_URL: a file URL names an absolute directory, file:///var/lib/hookgate/archive")
		}
		if endpoint != "" {
			return nil, nil, errors.New("GATEWAY_ARCHIVE_ENDPOINT: is for an s3:// archive, and GATEWAY_ARCHIVE_URL is a file:// one")
		}
		return u, nil, nil
	case "s3":
		if !bucketRE.MatchString(u.Host) {
			return nil, nil, errors.New("GATEWAY_ARCHIVE_URL: an s3 URL names a bucket (3 to 63 lower-case letters, digits, dots and dashes) and a prefix, s3://bucket/hookgate")
		}
		if endpoint == "" {
			return u, nil, nil
		}
		if !strings.Contains(endpoint, "://") { // host:port, over HTTPS
			endpoint = "https://" + endpoint
		}
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil || e.RawQuery != "" || (e.Path != "" && e.Path != "/") {
			return nil, nil, errors.New("GATEWAY_ARCHIVE_ENDPOINT: must be host:port or an http(s)://host:port URL, with no credentials, path or query")
		}
		return u, e, nil
	}
	return nil, nil, errors.New("GATEWAY_ARCHIVE_URL: the scheme is file or s3")
}

// bucketRE is an S3 bucket's name.
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Open returns the store rawURL names: file:///path, or s3://bucket/prefix
// reached at endpoint (host:port, or an http(s) URL; empty: AWS) with the
// credentials of the standard AWS_* variables.
func Open(rawURL, endpoint string) (Store, error) {
	u, e, err := parse(rawURL, endpoint)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		if err := os.MkdirAll(u.Path, 0o750); err != nil {
			return nil, fmt.Errorf("GATEWAY_ARCHIVE_URL: %w", err)
		}
		return dirStore{root: u.Path}, nil
	}
	return openS3(u.Host, strings.Trim(u.Path, "/"), e)
}

// dirStore keeps objects as files under root.
type dirStore struct{ root string }

func (d dirStore) String() string { return "file://" + d.root }

func (d dirStore) file(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

func (d dirStore) Put(_ context.Context, key string, r io.Reader, _ int64) error {
	name := d.file(key)
	if err := os.MkdirAll(filepath.Dir(name), 0o750); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	// Written beside, synced, then renamed: an object is whole or absent.
	f, err := os.CreateTemp(filepath.Dir(name), ".put-*")
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	return nil
}

func (d dirStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(d.file(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoObject, key)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	return f, nil
}

func (d dirStore) List(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(d.root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasPrefix(e.Name(), ".put-") {
			return err
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: list: %w", ErrStore, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// s3Store keeps objects in a bucket under a prefix, through minio-go.
type s3Store struct {
	client         *minio.Client
	bucket, prefix string
	endpoint       string
}

// openS3 connects to the bucket at endpoint (AWS's when nil).
func openS3(bucket, prefix string, endpoint *url.URL) (Store, error) {
	secure, host := true, "s3.amazonaws.com"
	if endpoint != nil {
		host, secure = endpoint.Host, endpoint.Scheme == "https"
	}
	client, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewEnvAWS(),
		Secure: secure,
		Region: os.Getenv("AWS_REGION"),
	})
	if err != nil {
		return nil, fmt.Errorf("GATEWAY_ARCHIVE_ENDPOINT: %w", err)
	}
	return &s3Store{client: client, bucket: bucket, prefix: prefix, endpoint: host}, nil
}

func (s *s3Store) String() string { return "s3://" + s.bucket + "/" + s.prefix + " at " + s.endpoint }

func (s *s3Store) key(key string) string { return path.Join(s.prefix, key) }

func (s *s3Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if _, err := s.client.PutObject(ctx, s.bucket, s.key(key), r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	return nil
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := s.client.StatObject(ctx, s.bucket, s.key(key), minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("%w: %s", ErrNoObject, key)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.key(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrStore, key, err)
	}
	return obj, nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("%w: list: %w", ErrStore, o.Err)
		}
		keys = append(keys, strings.TrimPrefix(strings.TrimPrefix(o.Key, s.prefix), "/"))
	}
	sort.Strings(keys)
	return keys, nil
}
