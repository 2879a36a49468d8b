// Package pgembed runs a private PostgreSQL server from the machine's own
// binaries, for when no DATABASE_URL is given. Its data directory survives
// restarts, and it is stopped with the process that started it.
//
// The server is reachable by the gateway alone. It opens no TCP listener
// (listen_addresses is empty), so neither another local user nor a container
// sharing the network namespace can reach it; it listens only on a Unix
// socket in a directory that only its own user can enter (root, who started
// it, passes anyway). That is why the cluster can trust every local
// connection: reaching the socket is the authentication. The data directory
// is private to the server's user too, as PostgreSQL demands.
//
// PostgreSQL refuses to run as root, so when the gateway runs as root the
// server runs as the "postgres" user (or "nobody" when there is none) and its
// data and socket directories are handed to that user.
package pgembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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

// ErrInUse means another live process owns the data directory's server.
var ErrInUse = errors.New("in use by another gateway")

// defaultPort is the port number that names the server's socket when
// Options.Port is zero. Each server has a socket directory of its own, so a
// fixed number cannot collide with another server.
const defaultPort = 5432

// maxSocketPath is the longest path a Unix socket may have on Linux:
// sizeof(sun_path) less its terminating NUL. PostgreSQL and Go both refuse
// longer ones.
const maxSocketPath = 107

// Options configure Start.
type Options struct {
	// Dir is the directory that holds the cluster (Dir/pgdata), its log
	// (Dir/postgres.log) and, when the path is short enough, its socket
	// (Dir/socket). Created when missing.
	Dir string
	// Database is created on first start when missing. Defaults to "hookgate".
	Database string
	// Ephemeral turns off fsync and synchronous commit: for tests only, where a
	// crash of the machine may lose the data.
	Ephemeral bool
	// Port is the number in the name of the server's Unix socket
	// (.s.PGSQL.<Port>); the server opens no TCP port. Zero: 5432.
	Port int
}

// Server is a running private PostgreSQL.
type Server struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{} // closed when the server process has exited
	log    *os.File
	lock   *os.File // the data directory's lock, held while the server runs
	pgdata string   // the cluster's directory, whose postmaster.pid names the server
	// tempSocketDir is the socket directory made under os.TempDir when
	// Dir/socket was too long a path; Stop removes it.
	tempSocketDir string
}

// URL is the connection string of the server's database: a pgx URL for its
// Unix socket.
func (s *Server) URL() string { return s.url }

// Start initialises the cluster when it does not exist yet, starts the server
// and waits until it answers.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Database == "" {
		opts.Database = "hookgate"
	}
	port := opts.Port
	if port == 0 {
		port = defaultPort
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: out of range", port)
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
	// Dir stays traversable so that the postgres user can reach pgdata and
	// the socket directory; both are private themselves.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.MkdirAll(pgdata, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			lock.Close()
		}
	}()
	// A server whose gateway died (SIGKILL) is shutting down: it got
	// SIGINT when its parent died. Wait for it, so that the new one neither
	// fails on its lock file nor is mistaken for it.
	if err := waitOrphan(ctx, pgdata); err != nil {
		return nil, err
	}
	cred, err := credential(dir, pgdata)
	if err != nil {
		return nil, err
	}
	socketDir, tempSocketDir, err := makeSocketDir(dir, port, cred)
	if err != nil {
		return nil, err
	}
	removeTemp := func() {
		if tempSocketDir != "" {
			os.RemoveAll(tempSocketDir)
		}
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		removeTemp()
		return nil, fmt.Errorf("open postgres log: %w", err)
	}

	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		// Local (socket) connections are trusted: only the server's user and
		// root can enter the socket directory. TCP ones are rejected in case
		// a listener is ever turned on; clusters made before that have trust
		// there too, which is harmless while listen_addresses is empty.
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
			"-D", pgdata, "-U", "hookgate", "--auth-local=trust", "--auth-host=reject",
			"--encoding=UTF8", "--no-locale")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			logFile.Close()
			removeTemp()
			return nil, fmt.Errorf("initdb in %s: %w: %s", pgdata, err, lastLines(string(out), 5))
		}
	}

	// Settings given with -c override postgresql.conf and ALTER SYSTEM, so
	// nothing stored in the cluster can open a TCP listener or move the
	// socket out of its private directory.
	args := []string{"-D", pgdata,
		"-c", "listen_addresses=",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + quoteListItem(socketDir),
		"-c", "unix_socket_permissions=0700",
		"-c", "max_connections=200",
		// hookgate's queries are short; compiling one costs more than it saves.
		"-c", "jit=off",
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
		removeTemp()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	started = true
	s := &Server{cmd: cmd, exited: make(chan struct{}), log: logFile, lock: lock, pgdata: pgdata, tempSocketDir: tempSocketDir}
	go func() { _ = cmd.Wait(); close(s.exited) }()

	if err := s.waitReady(ctx, socketURL(socketDir, port, "postgres"), filepath.Join(dir, "postgres.log")); err != nil {
		_ = s.Stop(context.Background())
		return nil, err
	}
	if err := createDatabase(ctx, socketURL(socketDir, port, "postgres"), opts.Database); err != nil {
		_ = s.Stop(context.Background())
		return nil, err
	}
	s.url = socketURL(socketDir, port, opts.Database)
	return s, nil
}

// Stop shuts the server down ("fast": open sessions are ended, committed data
// is kept) and waits for it, killing it if ctx ends first.
func (s *Server) Stop(ctx context.Context) error {
	defer s.log.Close()
	defer s.lock.Close() // the directory is free once the server is gone
	// Removed only once the server is gone: it still owns its socket there.
	defer func() {
		if s.tempSocketDir != "" {
			os.RemoveAll(s.tempSocketDir)
		}
	}()
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
		return nil
	case <-ctx.Done():
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("postgres did not stop in time: %w", ctx.Err())
	}
}

func (s *Server) waitReady(ctx context.Context, url, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Only this server's answer counts: its pid is in postmaster.pid.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, url)
		cancel()
		if err == nil {
			conn.Close(ctx)
			if postmasterPID(s.pgdata) == s.cmd.Process.Pid {
				return nil
			}
			err = errors.New("another server answers on its socket")
		}
		select {
		case <-s.exited:
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

// lockDir takes the data directory's lock (dir/gateway.lock, flock), which
// the kernel gives back when the process that holds it dies, however it
// dies: another live gateway holding it is ErrInUse.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "gateway.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is %w: several gateways share a database through DATABASE_URL", dir, ErrInUse)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	return f, nil
}

// postmasterPID is the pid in pgdata's postmaster.pid; 0 when there is none.
func postmasterPID(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}

// orphanWait bounds how long Start waits for the server of a gateway that
// died to shut down (it takes about a second: a checkpoint).
const orphanWait = 60 * time.Second

// waitOrphan waits while pgdata's postmaster.pid names a live process: the
// server of a gateway that died, which got SIGINT with its parent's death and
// is shutting down. Called with the directory's lock held, so no live
// gateway owns that server.
func waitOrphan(ctx context.Context, pgdata string) error {
	deadline := time.Now().Add(orphanWait)
	for {
		pid := postmasterPID(pgdata)
		if pid <= 0 || !alive(pid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the PostgreSQL server (pid %d) of a gateway that stopped has not shut down within %s; stop it, then start again", pid, orphanWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
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

// socketURL is the pgx URL of database on the server whose socket is in
// socketDir: the host parameter, a directory, makes pgx dial
// socketDir/.s.PGSQL.<port>. It stays a plain URL so that callers can swap
// its path for another database.
func socketURL(socketDir string, port int, database string) string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.User("hookgate"),
		Path:   "/" + database,
		// pgx decodes URLs as libpq does, where "+" stays a plus sign, so a
		// space must be written %20.
		RawQuery: "host=" + strings.ReplaceAll(url.QueryEscape(socketDir), "+", "%20") +
			"&port=" + strconv.Itoa(port) + "&sslmode=disable",
	}
	return u.String()
}

// socketPath is the path of the socket PostgreSQL makes in dir.
func socketPath(dir string, port int) string {
	return filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port))
}

// makeSocketDir returns the directory the server's socket goes in, made
// private to the server's user: dir/socket, or, when a socket there would
// have too long a path (or the path has a comma), a new directory under
// os.TempDir, returned a second time so that it is removed when the server
// stops.
func makeSocketDir(dir string, port int, cred *syscall.Credential) (socketDir, temp string, err error) {
	// pgx, like libpq, splits a host on commas: such a directory cannot be
	// named in a URL.
	usable := func(d string) bool {
		return len(socketPath(d, port)) <= maxSocketPath && !strings.Contains(d, ",")
	}
	socketDir = filepath.Join(dir, "socket")
	if usable(socketDir) {
		if err := os.Mkdir(socketDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return "", "", fmt.Errorf("create socket dir: %w", err)
		}
		if err := makePrivate(socketDir, cred); err != nil {
			return "", "", err
		}
		return socketDir, "", nil
	}
	if cred != nil {
		if err := reachable(os.TempDir(), cred); err != nil {
			return "", "", fmt.Errorf("socket dir: %s cannot hold a socket (too long a path, or a comma), and %w", dir, err)
		}
	}
	temp, err = os.MkdirTemp("", "hookgate-pg-")
	if err != nil {
		return "", "", fmt.Errorf("create socket dir: %w", err)
	}
	if !usable(temp) {
		os.Remove(temp)
		return "", "", fmt.Errorf("socket dir: neither %s nor %s can hold a socket (too long a path, or a comma); set TMPDIR to a short plain one", dir, os.TempDir())
	}
	if err := makePrivate(temp, cred); err != nil {
		os.Remove(temp)
		return "", "", err
	}
	return temp, temp, nil
}

// makePrivate makes the directory path owned by the server's user (cred, or
// this process's user when nil) and closed to everyone else. A symbolic
// link is refused: it could lead the socket anywhere.
func makePrivate(path string, cred *syscall.Credential) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket dir: %s is not a directory", path)
	}
	if cred != nil {
		if err := os.Lchown(path, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("socket dir: %w", err)
		}
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		// Not root, so it cannot be taken over: someone else could enter it.
		return fmt.Errorf("socket dir: %s belongs to uid %d, not to uid %d that runs PostgreSQL", path, st.Uid, os.Geteuid())
	}
	if err := os.Chmod(path, 0o700); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	return nil
}

// quoteListItem quotes a directory for a list setting such as
// unix_socket_directories, where a bare comma or space would split it.
func quoteListItem(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
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
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	// dir is ours: let the server's user pass through it (it lists nothing).
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
			return nil, fmt.Errorf("let user %s reach %s: %w", u.Username, dir, err)
		}
	}
	if err := reachable(dir, cred); err != nil {
		return nil, fmt.Errorf("%w: set GATEWAY_DATA_DIR to a path it can reach (under /tmp or /var/lib), or set DATABASE_URL", err)
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
	return cred, nil
}

// reachable reports which parent of dir the server's user (cred) cannot pass
// through, if any: a parent closed to others, since that user owns none of
// them.
func reachable(dir string, cred *syscall.Credential) error {
	for parent := filepath.Dir(dir); ; parent = filepath.Dir(parent) {
		fi, err := os.Stat(parent)
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			name := strconv.Itoa(int(cred.Uid))
			if u, err := user.LookupId(name); err == nil {
				name = u.Username
			}
			return fmt.Errorf("PostgreSQL runs as user %s, who cannot pass through %s to reach %s", name, parent, dir)
		}
		if parent == filepath.Dir(parent) {
			return nil
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Running returns the URL of the private server already running in dir (a
// gateway started it), when it answers. Its postmaster.pid names the socket:
// line 4 is the port number, line 5 the socket directory.
func Running(ctx context.Context, dir, database string) (string, bool) {
	if database == "" {
		database = "hookgate"
	}
	pid, err := os.ReadFile(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if err != nil {
		return "", false
	}
	lines := strings.Split(string(pid), "\n")
	if len(lines) < 5 {
		return "", false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return "", false
	}
	// No socket directory means a server that is not ours to reach, such as
	// one an older gateway started on TCP.
	socketDir := lines[4]
	if !filepath.IsAbs(socketDir) {
		return "", false
	}
	url := socketURL(socketDir, port, database)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return "", false
	}
	conn.Close(cctx)
	return url, true
}
