package wool

// #include <stdlib.h>
// #include "wool.h"
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Credentials are TLS credentials for reaching TLS workers: the CA certificates the worker's
// certificate must chain to and, for mutual TLS, the client's certificate and private key.
// Pass them to Connect with WithCredentials. A Connection keeps its own copy, so Credentials
// may be closed right after Connect. Safe for concurrent use.
//
// Close them when done: a cleanup (runtime.AddCleanup) frees forgotten ones, but only whenever
// the garbage collector runs, and the key material lives in C memory it cannot see.
type Credentials struct {
	handle  *credHandle
	cleanup runtime.Cleanup // frees handle once the Credentials are unreachable
}

// credHandle is the C handle of Credentials, separate from them so that the cleanup can free
// it without keeping the Credentials reachable.
type credHandle struct {
	ptr   *C.wool_credentials // an opaque value naming the library's handle, never dereferenced
	freed atomic.Bool         // set once, by the one free that frees ptr
}

// CredentialsFromPEM makes credentials from PEM text (the argument order is Wool's: CA, key,
// certificate).
//
//   - caPEM: one or more CA certificates the worker's certificate must chain to.
//   - keyPEM, certPEM: the client's private key and certificate chain, for mutual TLS; ignored
//     (and may be nil) when mutual is false, which gives one-way TLS: the client verifies the
//     worker and presents no certificate.
//   - identity: the subject-alternative name (DNS name or IP address) to verify the worker's
//     certificate against instead of the dialed host; "" means the dialed host.
//
// The PEM is checked now, so bad PEM fails here rather than on the first call. Returns an
// *Error matching ErrInvalidArgument when caPEM is empty, mutual TLS lacks the key or the
// certificate, a PEM block holds no certificate or key, a text contains a NUL byte, or
// identity is neither a DNS name nor an IP address.
func CredentialsFromPEM(caPEM, keyPEM, certPEM []byte, mutual bool, identity string) (*Credentials, error) {
	for _, text := range [][2]string{
		{"CA PEM", string(caPEM)}, {"key PEM", string(keyPEM)}, {"certificate PEM", string(certPEM)},
		{"identity", identity},
	} {
		if err := checkText(text[0], text[1]); err != nil {
			return nil, err
		}
	}
	// An empty CA becomes "" rather than NULL: the library then says the PEM holds no
	// certificate, which is the actual mistake.
	ca := C.CString(string(caPEM))
	key, cert := optionalCString(string(keyPEM)), optionalCString(string(certPEM))
	name := optionalCString(identity)
	defer freeAll(ca, key, cert, name)
	return newCredentials(func(out **C.wool_credentials) C.wool_status {
		return C.wool_credentials_from_pem(ca, key, cert, C.bool(mutual), name, out)
	})
}

// CredentialsFromFiles is CredentialsFromPEM reading the PEM from files: caPath, and for
// mutual TLS keyPath and certPath ("" when mutual is false). An unreadable file is an
// ErrInvalidArgument whose message names it. The files are read once, now; see
// ReloadableCredentialsFromFiles for files that are rotated.
func CredentialsFromFiles(caPath, keyPath, certPath string, mutual bool, identity string) (*Credentials, error) {
	return credentialsFromFiles(caPath, keyPath, certPath, mutual, identity,
		func(ca, key, cert *C.char, mutual C.bool, name *C.char, out **C.wool_credentials) C.wool_status {
			return C.wool_credentials_from_files(ca, key, cert, mutual, name, out)
		})
}

// ReloadableCredentialsFromFiles is CredentialsFromFiles whose files are read again when they
// change, as Wool's WorkerCredentialsProvider(reloadable=True): for certificates that are
// rotated on disk (replace each file whole, by renaming a new file over it). At most once a
// second a call on a Connection made with them looks at the files (stat), and when one
// changed reads them all again: the Connection's next calls dial with the new material, and
// the pooled channel made with the old material is retired once the calls still running on it
// end. New material that fails the checks (a half-written file, a key that does not match its
// certificate) is refused and the previous material kept; it is tried again a second later.
// Mutual or one-way TLS stays as made. The arguments and errors are CredentialsFromFiles'
// (the files are read and checked now, too).
func ReloadableCredentialsFromFiles(caPath, keyPath, certPath string, mutual bool, identity string) (*Credentials, error) {
	return credentialsFromFiles(caPath, keyPath, certPath, mutual, identity,
		func(ca, key, cert *C.char, mutual C.bool, name *C.char, out **C.wool_credentials) C.wool_status {
			return C.wool_credentials_from_files_reloadable(ca, key, cert, mutual, name, out)
		})
}

// fromFilesFunc is the shape of wool_credentials_from_files and its reloadable sibling.
type fromFilesFunc func(ca, key, cert *C.char, mutual C.bool, identity *C.char, out **C.wool_credentials) C.wool_status

// credentialsFromFiles checks the arguments of the two file constructors, copies them into C
// memory and calls make with them.
func credentialsFromFiles(caPath, keyPath, certPath string, mutual bool, identity string, make fromFilesFunc) (*Credentials, error) {
	for _, text := range [][2]string{
		{"CA path", caPath}, {"key path", keyPath}, {"certificate path", certPath}, {"identity", identity},
	} {
		if err := checkText(text[0], text[1]); err != nil {
			return nil, err
		}
	}
	ca := C.CString(caPath)
	key, cert, name := optionalCString(keyPath), optionalCString(certPath), optionalCString(identity)
	defer freeAll(ca, key, cert, name)
	return newCredentials(func(out **C.wool_credentials) C.wool_status {
		return make(ca, key, cert, C.bool(mutual), name, out)
	})
}

// newCredentials runs one wool_credentials_from_* call and wraps its result.
func newCredentials(make func(out **C.wool_credentials) C.wool_status) (*Credentials, error) {
	var ptr *C.wool_credentials
	if err := call("credentials", "", func() C.wool_status { return make(&ptr) }); err != nil {
		return nil, err
	}
	c := &Credentials{handle: &credHandle{ptr: ptr}}
	c.cleanup = runtime.AddCleanup(c, (*credHandle).free, c.handle)
	return c, nil
}

// Close releases the credentials. Connections made with them keep working (they hold their
// own copy). Closing twice is harmless. It always returns nil.
func (c *Credentials) Close() error {
	c.handle.free()
	c.cleanup.Stop() // a no-op when already stopped
	runtime.KeepAlive(c)
	return nil
}

// free frees the C handle once (Close and the cleanup may both run it, on any goroutine,
// while a Connect uses it: the library settles the race).
func (h *credHandle) free() {
	if h.freed.CompareAndSwap(false, true) {
		C.wool_credentials_free(h.ptr)
	}
}

// use runs f with the C handle; ErrClosed when the credentials are closed, also when a Close
// on another goroutine frees them before the library looks them up.
func (c *Credentials) use(f func(*C.wool_credentials) error) error {
	if c.handle.freed.Load() {
		return ErrClosed
	}
	err := closedIfFreed(f(c.handle.ptr), &c.handle.freed)
	runtime.KeepAlive(c)
	return err
}

// checkText refuses text with a NUL byte: C would silently cut it there.
func checkText(name, value string) error {
	if strings.IndexByte(value, 0) >= 0 {
		return invalidArgument("credentials", "", name+" contains a NUL byte")
	}
	return nil
}

// optionalCString copies s into C memory; nil for "".
func optionalCString(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

// freeAll frees C text made by C.CString; nil entries are skipped by free itself.
func freeAll(ptrs ...*C.char) {
	for _, p := range ptrs {
		C.free(unsafe.Pointer(p))
	}
}

// maxPeers is the most names WithPeers takes (wool_credentials_with_peers' limit).
const maxPeers = 4096

// WithPeers returns a copy of the credentials carrying a peers policy (Wool's peers, the
// library's wool_credentials_with_peers): discovery (DiscoverAdmitted, ConnectWorker) then
// admits a discovered worker only if it advertises one of names (each trimmed of surrounding
// whitespace), and verifies its certificate against that name unless the credentials carry an
// identity, which always wins. A worker advertising no name is refused. c is unchanged; close
// the copy separately.
//
// Errors: an *Error (Op "credentials") matching ErrInvalidArgument when names is empty or
// longer than 4096, or a name is blank, longer than 253 bytes or contains a NUL byte;
// ErrClosed when c is closed.
func (c *Credentials) WithPeers(names ...string) (*Credentials, error) {
	if len(names) == 0 || len(names) > maxPeers {
		return nil, invalidArgument("credentials", "", fmt.Sprintf("WithPeers takes 1 to %d names, got %d", maxPeers, len(names)))
	}
	texts := make([]*C.char, 0, len(names))
	defer func() { freeAll(texts...) }()
	for _, name := range names {
		if err := checkText("peer name", name); err != nil {
			return nil, err
		}
		texts = append(texts, C.CString(name))
	}
	// The array of pointers lives in C memory: cgo forbids passing Go memory holding pointers.
	array := (**C.char)(C.malloc(C.size_t(len(texts)) * C.size_t(unsafe.Sizeof(texts[0]))))
	defer C.free(unsafe.Pointer(array))
	copy(unsafe.Slice(array, len(texts)), texts)
	var made *Credentials
	err := c.use(func(ptr *C.wool_credentials) error {
		var err error
		made, err = newCredentials(func(out **C.wool_credentials) C.wool_status {
			return C.wool_credentials_with_peers(ptr, array, C.size_t(len(texts)), out)
		})
		return err
	})
	return made, err
}
