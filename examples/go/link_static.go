//go:build woolstatic

package wool

// Static linking against the repository's debug build: libwool.a plus the system libraries a
// Rust static library needs.

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: ${SRCDIR}/../../target/debug/libwool.a -lm -ldl -lpthread
import "C"
