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

// Open returns the store rawURL names: file:///path, or s3://bucket/prefix
// reached at endpoint (host:port, or an http(s) URL; empty: AWS) with the
// credentials of the standard AWS_* variables.
func Open(rawURL, endpoint string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("GATEWAY_ARCHIVE_URL: not a URL (file:///path or s3://bucket/prefix)")
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("GATEWAY_ARCHIVE_URL: a file URL names an absolute directory, file:///var/lib/hookgate/archive")
		}
		if err := os.MkdirAll(u.Path, 0o750); err != nil {
			return nil, fmt.Errorf("GATEWAY_ARCHIVE_URL: %w", err)
		}
		return dirStore{root: u.Path}, nil
	case "s3":
		if u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("GATEWAY_ARCHIVE_URL: an s3 URL names a bucket and a prefix, s3://bucket/hookgate, and no credentials (they come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
		}
		return openS3(u.Host, strings.Trim(u.Path, "/"), endpoint)
	}
	return nil, fmt.Errorf("GATEWAY_ARCHIVE_URL: the scheme is file or s3, got %q", u.Scheme)
}

// dirStore keeps objects as files under root.
type dirStore struct{ root string }

func (d dirStore) String() string { return "file://" + d.root }

func (d dirStore) file(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

func (d dirStore) Put(_ context.Context, key string, r io.Reader, _ int64) error {
	name := d.file(key)
	if err := os.MkdirAll(filepath.Dir(name), 0o750); err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	// Written beside, synced, then renamed: an object is whole or absent.
	f, err := os.CreateTemp(filepath.Dir(name), ".put-*")
	if err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
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
		return fmt.Errorf("archive %s: %w", key, err)
	}
	return nil
}

func (d dirStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(d.file(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoObject, key)
	}
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
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
		return nil, fmt.Errorf("list the archive: %w", err)
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

// openS3 connects to the bucket at endpoint (AWS's when empty).
func openS3(bucket, prefix, endpoint string) (Store, error) {
	secure, host := true, "s3.amazonaws.com"
	if endpoint != "" {
		host = endpoint
		if e, err := url.Parse(endpoint); err == nil && (e.Scheme == "http" || e.Scheme == "https") {
			host, secure = e.Host, e.Scheme == "https"
		}
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
		return fmt.Errorf("archive %s: %w", key, err)
	}
	return nil
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := s.client.StatObject(ctx, s.bucket, s.key(key), minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("%w: %s", ErrNoObject, key)
		}
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.key(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	return obj, nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list the archive: %w", o.Err)
		}
		keys = append(keys, strings.TrimPrefix(strings.TrimPrefix(o.Key, s.prefix), "/"))
	}
	sort.Strings(keys)
	return keys, nil
}
