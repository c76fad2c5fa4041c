package wool_test

// Certificate rotation with ReloadableCredentialsFromFiles, against wool-worker re-reading its
// own files: the files are replaced mid-run, as real rotations do (a new file renamed over the
// old one), while a goroutine keeps polling.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	wool "github.com/libwool/libwool/bindings/go"
	"github.com/libwool/libwool/bindings/go/internal/workertest"
)

const (
	// pollEvery and pollTimeout pace and bound the polls made while the files rotate.
	pollEvery   = 20 * time.Millisecond
	pollTimeout = 2 * time.Second
	// settle is how long a rotation step is given: the credentials look at their files at
	// most once a second, wool-worker within about 100 ms of a change.
	settle = 1500 * time.Millisecond
)

// tlsFiles are one side's TLS files (the CA it trusts, its certificate and key) in a
// directory of their own.
type tlsFiles struct{ ca, cert, key string }

// writeTLSFiles writes caPEM and leaf as ca.pem, cert.pem and key.pem in a new directory.
func writeTLSFiles(t *testing.T, caPEM []byte, leaf workertest.Leaf) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	files := tlsFiles{
		ca:   filepath.Join(dir, "ca.pem"),
		cert: filepath.Join(dir, "cert.pem"),
		key:  filepath.Join(dir, "key.pem"),
	}
	files.setCA(t, caPEM)
	files.setLeaf(t, leaf)
	return files
}

func (f tlsFiles) setCA(t *testing.T, caPEM []byte) { replaceFile(t, f.ca, caPEM) }

func (f tlsFiles) setLeaf(t *testing.T, leaf workertest.Leaf) {
	replaceFile(t, f.cert, leaf.CertPEM)
	replaceFile(t, f.key, leaf.KeyPEM)
}

// workerArgs are wool-worker's flags for mutual TLS on these files.
func (f tlsFiles) workerArgs() []string {
	return []string{"--tls-ca", f.ca, "--tls-cert", f.cert, "--tls-key", f.key}
}

// replaceFile replaces path's content whole, as a rotation does: data is written to a
// temporary file in the same directory, which is then renamed over path.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	temporary := path + ".new"
	if err := os.WriteFile(temporary, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(temporary, path); err != nil {
		t.Fatal(err)
	}
}

// poller polls one connection every pollEvery in a goroutine, counting the outcomes.
type poller struct {
	conn  *wool.Connection
	start time.Time
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex
	ok       int
	failures []string // each failed poll, with when it happened and the phase it was in
	phase    string
}

func startPoller(conn *wool.Connection, phase string) *poller {
	p := &poller{conn: conn, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), phase: phase}
	go p.run()
	return p
}

func (p *poller) run() {
	defer close(p.done)
	ticker := time.NewTicker(pollEvery)
	defer ticker.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
		_, err := p.conn.Idle(ctx)
		cancel()
		p.mu.Lock()
		if err == nil {
			p.ok++
		} else {
			p.failures = append(p.failures, fmt.Sprintf("%v into the run (%s): %v",
				time.Since(p.start).Round(time.Millisecond), p.phase, err))
		}
		p.mu.Unlock()
		select {
		case <-p.stop:
			return
		case <-ticker.C:
		}
	}
}

// enter names the phase the next polls are in (for the failure messages).
func (p *poller) enter(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase = phase
}

// finish stops the polls and requires that none failed and that at least minOK succeeded.
func (p *poller) finish(t *testing.T, minOK int) {
	t.Helper()
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("%d polls succeeded and %d failed over %v", p.ok, len(p.failures), time.Since(p.start).Round(time.Millisecond))
	for _, failure := range p.failures {
		t.Errorf("failed poll: %s", failure)
	}
	if p.ok < minOK {
		t.Errorf("only %d polls succeeded, want at least %d", p.ok, minOK)
	}
}

// restartOnSameAddress stops worker over conn and starts wool-worker again on its address
// with args (the files as they are now), so that conn's next call has to dial a new TLS
// connection with its credentials' current material: a connection established earlier, which
// the worker would let carry on, cannot hide which material the credentials hold.
func restartOnSameAddress(t *testing.T, conn *wool.Connection, worker *workertest.Process, args ...string) *workertest.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := conn.Stop(ctx, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if code, exited := worker.WaitExit(10 * time.Second); !exited || code != 0 {
		t.Fatalf("worker after Stop: exited %v, status %d; want exit status 0", exited, code)
	}
	restarted := workertest.StartWorker(t, append([]string{"--listen", worker.Address}, args...)...)
	if restarted.Address != worker.Address {
		t.Fatalf("restarted worker at %s, want %s", restarted.Address, worker.Address)
	}
	return restarted
}

// mustIdleAfterRestart polls conn until it answers, retrying only transient failures (the
// previous worker's connection going away) for a few seconds; any other failure fails the test.
func mustIdleAfterRestart(t *testing.T, conn *wool.Connection) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := idle(conn)
		if err == nil {
			return
		}
		if !errors.Is(err, wool.ErrTransient) || time.Now().After(deadline) {
			t.Fatalf("Idle on the restarted worker: %v", err)
		}
		t.Logf("transient failure on the restarted worker, retrying: %v", err)
		time.Sleep(pollEvery)
	}
}

// Given a wool-worker serving mutual TLS from files with CA1's worker certificate, and a
// connection made with ReloadableCredentialsFromFiles on client files with CA1's client
// certificate, polled every 20 ms throughout; when the CA is rotated in three steps, both
// sides' files replaced by renaming (a) both CA files with CA1+CA2, (b) both leaves with CA2's,
// (c) both CA files with CA2 alone, 1.5 s apart; then no poll fails; afterwards CA1's material
// is refused (fresh fixed credentials trusting CA1 fail the handshake, CA1's client
// certificate is turned away by the worker), and the rotated connection reaches the worker
// restarted on CA2's files alone, so it really dials with CA2's material.
func TestReloadableCredentialsFollowACARotation(t *testing.T) {
	t.Parallel()
	ca1, ca2 := workertest.NewCA(t, "rotation-ca-1"), workertest.NewCA(t, "rotation-ca-2")
	leaves := t.TempDir()
	worker1, client1 := ca1.NewLeaf(t, leaves, "worker-1"), ca1.NewLeaf(t, leaves, "client-1")
	worker2, client2 := ca2.NewLeaf(t, leaves, "worker-2"), ca2.NewLeaf(t, leaves, "client-2")
	bundle := append(append([]byte{}, ca1.PEM...), ca2.PEM...)

	workerFiles, clientFiles := writeTLSFiles(t, ca1.PEM, worker1), writeTLSFiles(t, ca1.PEM, client1)
	worker := workertest.StartWorker(t, workerFiles.workerArgs()...)
	credentials, err := wool.ReloadableCredentialsFromFiles(clientFiles.ca, clientFiles.key, clientFiles.cert, true, "")
	if err != nil {
		t.Fatal(err)
	}
	defer credentials.Close()
	conn := connect(t, worker.Address, wool.WithCredentials(credentials))
	mustIdle(t, conn)

	polls := startPoller(conn, "CA1")
	time.Sleep(500 * time.Millisecond)
	polls.enter("(a) trusting CA1+CA2")
	workerFiles.setCA(t, bundle)
	clientFiles.setCA(t, bundle)
	time.Sleep(settle)
	polls.enter("(b) CA2's leaves")
	workerFiles.setLeaf(t, worker2)
	clientFiles.setLeaf(t, client2)
	time.Sleep(settle)
	polls.enter("(c) trusting CA2 alone")
	workerFiles.setCA(t, ca2.PEM)
	clientFiles.setCA(t, ca2.PEM)
	time.Sleep(settle)
	polls.finish(t, 50)

	t.Run("CA1 no longer verifies the worker", func(t *testing.T) {
		old, err := wool.CredentialsFromPEM(ca1.PEM, client1.KeyPEM, client1.CertPEM, true, "")
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		_, err = idle(connect(t, worker.Address, wool.WithCredentials(old)))
		requireKind(t, err, wool.ErrHandshake)
	})
	t.Run("the worker no longer accepts CA1's client certificate", func(t *testing.T) {
		// As in TestMutualTLS: the worker refuses the client after the client accepted it.
		old, err := wool.CredentialsFromPEM(ca2.PEM, client1.KeyPEM, client1.CertPEM, true, "")
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		_, err = idle(connect(t, worker.Address, wool.WithCredentials(old)))
		requireKind(t, err, wool.ErrHandshake)
		t.Logf("as expected: %v", err)
	})
	t.Run("the rotated connection dials with CA2's material", func(t *testing.T) {
		restartOnSameAddress(t, conn, worker, workerFiles.workerArgs()...)
		mustIdleAfterRestart(t, conn)
	})
}

// Given a connection made with ReloadableCredentialsFromFiles to a mutual-TLS wool-worker,
// when its CA file is overwritten in place with garbage (a half-written file), then polls
// every 20 ms for 1.5 s all succeed, and the connection still reaches the worker restarted on
// the same address: the refused file left the previous material in use.
func TestReloadableCredentialsKeepTheirMaterialWhenAFileTurnsToGarbage(t *testing.T) {
	t.Parallel()
	pki := workertest.NewPKI(t)
	worker := workertest.StartWorker(t, pki.MutualArgs()...)
	clientFiles := writeTLSFiles(t, pki.CAPEM, pki.Leaf)
	credentials, err := wool.ReloadableCredentialsFromFiles(clientFiles.ca, clientFiles.key, clientFiles.cert, true, "")
	if err != nil {
		t.Fatal(err)
	}
	defer credentials.Close()
	conn := connect(t, worker.Address, wool.WithCredentials(credentials))
	mustIdle(t, conn)

	polls := startPoller(conn, "garbage CA file")
	half := pki.CAPEM[:len(pki.CAPEM)/2]
	if err := os.WriteFile(clientFiles.ca, half, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settle)
	polls.finish(t, 20)

	restartOnSameAddress(t, conn, worker, pki.MutualArgs()...)
	mustIdleAfterRestart(t, conn)
}

// Given missing files, when ReloadableCredentialsFromFiles is called, then it fails at once
// with ErrInvalidArgument naming the file, as CredentialsFromFiles does; a NUL in a path is
// refused before the library is called.
func TestReloadableCredentialsFromFilesInvalidArguments(t *testing.T) {
	t.Parallel()
	_, err := wool.ReloadableCredentialsFromFiles("/nonexistent/ca.pem", "", "", false, "")
	werr := requireKind(t, err, wool.ErrInvalidArgument)
	if werr.Code != -1 || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Errorf("want no gRPC code and a message naming the file: %#v", werr)
	}
	if !strings.Contains(werr.Message, "wool_credentials_from_files_reloadable") {
		t.Errorf("the message does not name the reloadable constructor: %v", err)
	}
	_, err = wool.ReloadableCredentialsFromFiles("ca\x00.pem", "", "", false, "")
	requireKind(t, err, wool.ErrInvalidArgument)
}
