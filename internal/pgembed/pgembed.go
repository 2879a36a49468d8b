// Package pgembed runs a private PostgreSQL server from the machine's own
// binaries, for when no DATABASE_URL is given. Its data directory survives
// restarts; the server listens on 127.0.0.1 only, on a free port chosen at each
// start, and is stopped with the process that started it.
//
// PostgreSQL refuses to run as root, so when the gateway runs as root the
// server runs as the "postgres" user (or "nobody" when there is none) and its
// directory is handed to that user.
package pgembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries means initdb and postgres were not found.
var ErrNoBinaries = errors.New("PostgreSQL binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; " +
	"install them (apt-get update && apt-get install -y postgresql) or set DATABASE_URL")

// Options configure Start.
type Options struct {
	// Dir is the directory that holds the cluster (Dir/pgdata) and its log
	// (Dir/postgres.log). Created when missing.
	Dir string
	// Database is created on first start when missing. Defaults to "hookgate".
	Database string
	// Ephemeral turns off fsync and synchronous commit: for tests only, where a
	// crash of the machine may lose the data.
	Ephemeral bool
	// Port is the port to listen on. Zero: a free port, chosen at each start.
	Port int
}

// Server is a running private PostgreSQL.
type Server struct {
	cmd  *exec.Cmd
	url  string
	done chan error
	log  *os.File
}

// URL is the connection string of the server's database.
func (s *Server) URL() string { return s.url }

// Start initialises the cluster when it does not exist yet, starts the server
// and waits until it answers.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Database == "" {
		opts.Database = "hookgate"
	}
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	pgdata := filepath.Join(dir, "pgdata")
	// Dir stays traversable so that the postgres user can reach pgdata.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.MkdirAll(pgdata, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	cred, err := credential(dir, pgdata)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open postgres log: %w", err)
	}

	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
			"-D", pgdata, "-U", "hookgate", "--auth=trust", "--encoding=UTF8", "--no-locale")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			logFile.Close()
			return nil, fmt.Errorf("initdb in %s: %w: %s", pgdata, err, lastLines(string(out), 5))
		}
	}

	port := opts.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			logFile.Close()
			return nil, err
		}
	}
	args := []string{"-D", pgdata,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=",
		"-c", "max_connections=200",
	}
	if opts.Ephemeral {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig stops the server if the gateway dies without stopping it;
	// Setpgid keeps a terminal's Ctrl-C from reaching it before the gateway
	// has shut down in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{cmd: cmd, done: make(chan error, 1), log: logFile}
	go func() { s.done <- cmd.Wait() }()

	base := fmt.Sprintf("postgres://hookgate@127.0.0.1:%d/", port)
	if err := s.waitReady(ctx, base+"postgres", filepath.Join(dir, "postgres.log")); err != nil {
		_ = s.Stop(context.Background())
		return nil, err
	}
	if err := createDatabase(ctx, base+"postgres", opts.Database); err != nil {
		_ = s.Stop(context.Background())
		return nil, err
	}
	s.url = base + opts.Database + "?sslmode=disable"
	return s, nil
}

// Stop shuts the server down ("fast": open sessions are ended, committed data
// is kept) and waits for it, killing it if ctx ends first.
func (s *Server) Stop(ctx context.Context) error {
	defer s.log.Close()
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("postgres did not stop in time: %w", ctx.Err())
	}
}

func (s *Server) waitReady(ctx context.Context, url, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited at start: %s", lastLines(string(log), 5))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not answer within 60s: %w", err)
		}
	}
}

func createDatabase(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// findBinaries returns the directory holding initdb and postgres: PATH first,
// then the newest /usr/lib/postgresql/<version>/bin.
func findBinaries() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, dir := range dirs {
		_, e1 := os.Stat(filepath.Join(dir, "initdb"))
		_, e2 := os.Stat(filepath.Join(dir, "postgres"))
		if e1 == nil && e2 == nil {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// credential returns who the server runs as: nil (this process's user) unless
// this process is root, and then the postgres user, who is given pgdata and
// must be able to pass through dir and its parents.
func credential(dir, pgdata string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres or nobody user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// dir is ours: let the server's user pass through it (it lists nothing).
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
			return nil, fmt.Errorf("let user %s reach %s: %w", u.Username, dir, err)
		}
	}
	for parent := filepath.Dir(dir); ; parent = filepath.Dir(parent) {
		fi, err := os.Stat(parent)
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("PostgreSQL runs as user %s, who cannot pass through %s to reach %s: "+
				"set GATEWAY_DATA_DIR to a path it can reach (under /tmp or /var/lib), or set DATABASE_URL", u.Username, parent, dir)
		}
		if parent == filepath.Dir(parent) {
			break
		}
	}
	err = filepath.WalkDir(pgdata, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return nil, fmt.Errorf("give %s to user %s: %w", pgdata, u.Username, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Running returns the URL of the private server already running in dir (a
// gateway started it), read from its postmaster.pid, when it answers.
func Running(ctx context.Context, dir, database string) (string, bool) {
	if database == "" {
		database = "hookgate"
	}
	pid, err := os.ReadFile(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if err != nil {
		return "", false
	}
	lines := strings.Split(string(pid), "\n")
	if len(lines) < 4 {
		return "", false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return "", false
	}
	url := fmt.Sprintf("postgres://hookgate@127.0.0.1:%d/%s?sslmode=disable", port, database)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return "", false
	}
	conn.Close(cctx)
	return url, true
}
